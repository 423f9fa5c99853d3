"""A Gemini client's `contents` (and `systemInstruction`) → IR messages, and the shape checks on them.

Owns:
- parts: `text`, `inlineData` (images → ImagePart, audio → AudioPart, else FilePart), `fileData`
  (image/* → ImagePart(url), else FilePart(url)), `functionCall` (model turns), `functionResponse`
  (user turns; → role "tool" messages ahead of the turn's other content, the `response` object as
  JSON text, `{"error": …}` alone marking a failed call), `executableCode` / `codeExecutionResult`
  (→ text, so other upstreams still see what ran), thought text (`thought: true` → ReasoningPart,
  consecutive ones merged);
- call ids: a call's Gemini `id` when given, else one minted from its position (`call_` + 24 hex,
  the same on every request of the conversation, so upstream prompt caches still match); a
  functionResponse finds its call by id, else by name and order;
- thought signatures: a token the proxy made (`carrier`) gives back the reasoning parts it carries,
  in place of any thought text the client kept beside it; `skip_thought_signature_validator`
  (gemini-cli puts it on the first call of each step) means nothing and is dropped; any other value
  (Google's own, from a history made through a passthrough) is wrapped in a Gemini envelope with no
  origin ("") and its placement, so no upstream that did not issue it gets it back;
- consecutive model contents are one assistant turn (google-genai's chat helper keeps one content
  per streamed chunk).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.errors import invalid
from proxy.ir.reasoning import gemini_envelope, gemini_from_envelope
from proxy.ir.request import (
    AudioPart,
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from proxy.protocols.gemini import carrier
from proxy.protocols.gemini.vocabulary import SKIP_SIGNATURE, minted_call_id
from proxy.protocols.validation import expect, get, join, one_of

ROLES = ("user", "model")
DATA_FIELDS = ("text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode",
               "codeExecutionResult")


# ---------------------------------------------------------------- shape checks


def validate_contents(contents: Any, path: str) -> None:
    expect(contents, list, path)
    for i, content in enumerate(contents):
        cpath = join(path, i)
        expect(content, dict, cpath)
        role = content.get("role") or "user"
        one_of(role, ROLES, join(cpath, "role"))
        parts = content.get("parts")
        if parts is None:
            raise invalid(join(cpath, "parts"), "is required: a content needs at least one part")
        expect(parts, list, join(cpath, "parts"))
        if not parts:
            raise invalid(join(cpath, "parts"), "must not be empty")
        for j, part in enumerate(parts):
            validate_part(part, join(join(cpath, "parts"), j), role)


def validate_part(part: Any, path: str, role: str) -> None:
    expect(part, dict, path)
    kinds = [k for k in DATA_FIELDS if part.get(k) is not None]
    get(part, "thought", bool, path)
    get(part, "thoughtSignature", str, path)
    if not kinds and part.get("thought") is None and part.get("thoughtSignature") is None:
        raise invalid(path, f"must have one of {', '.join(DATA_FIELDS)} (an unknown or empty part)")
    if len(kinds) > 1:
        raise invalid(path, f"must have only one of {', '.join(DATA_FIELDS)}, not {' and '.join(kinds)}")
    kind = kinds[0] if kinds else None
    if kind == "text":
        get(part, "text", str, path)
    elif kind == "inlineData":
        data = get(part, "inlineData", dict, path)
        get(data, "mimeType", str, join(path, "inlineData"), required=True)
        get(data, "data", str, join(path, "inlineData"), required=True)
    elif kind == "fileData":
        data = get(part, "fileData", dict, path)
        get(data, "fileUri", str, join(path, "fileData"), required=True)
        get(data, "mimeType", str, join(path, "fileData"))
    elif kind == "functionCall":
        if role != "model":
            raise invalid(join(path, "functionCall"), "only a model turn calls functions")
        call = get(part, "functionCall", dict, path)
        get(call, "name", str, join(path, "functionCall"), required=True)
        get(call, "args", dict, join(path, "functionCall"))
        get(call, "id", str, join(path, "functionCall"))
    elif kind == "functionResponse":
        if role != "user":
            raise invalid(join(path, "functionResponse"), "belongs in a user turn")
        result = get(part, "functionResponse", dict, path)
        get(result, "name", str, join(path, "functionResponse"), required=True)
        get(result, "response", dict, join(path, "functionResponse"))
        get(result, "id", str, join(path, "functionResponse"))
    elif kind in ("executableCode", "codeExecutionResult"):
        get(part, kind, dict, path)


def system_parts(system: Any, path: str) -> list[Part]:
    """`systemInstruction`: a Content (its role, if any, is ignored) or, leniently, a string."""
    if isinstance(system, str):
        return [TextPart(system)] if system else []
    expect(system, dict, path)
    parts = get(system, "parts", list, path) or []
    out: list[Part] = []
    for j, part in enumerate(parts):
        ppath = join(join(path, "parts"), j)
        expect(part, dict, ppath)
        text = get(part, "text", str, ppath)
        if text:
            out.append(TextPart(text))
    return out


# ---------------------------------------------------------------- decoding


class _Calls:
    """Call ids, and the calls not answered yet by name (Gemini matches answers by name and order)."""

    def __init__(self) -> None:
        self.open: dict[str, list[str]] = {}

    def call(self, raw: dict[str, Any], where: str) -> str:
        name = raw["name"]
        call_id = raw.get("id") or minted_call_id(where, name)
        self.open.setdefault(name, []).append(call_id)
        return str(call_id)

    def answer(self, raw: dict[str, Any], where: str) -> str:
        name = raw["name"]
        given = raw.get("id")
        waiting = self.open.get(name, [])
        if given and given in waiting:
            waiting.remove(given)
            return str(given)
        if waiting:
            return waiting.pop(0)
        return str(given) if given else minted_call_id(where, name)


def decode_contents(contents: list[dict[str, Any]]) -> list[Message]:
    calls = _Calls()
    messages: list[Message] = []
    i = 0
    while i < len(contents):
        if (contents[i].get("role") or "user") == "model":
            run: list[tuple[str, dict[str, Any]]] = []
            while i < len(contents) and contents[i].get("role") == "model":
                run += [(f"{i}.{j}", p) for j, p in enumerate(contents[i]["parts"])]
                i += 1
            messages.append(Message("assistant", _model_parts(run, calls)))
            continue
        messages += _user_turn(contents[i]["parts"], str(i), calls)
        i += 1
    return messages


def _model_parts(run: list[tuple[str, dict[str, Any]]], calls: _Calls) -> list[Part]:
    out: list[Part] = []
    pending: list[str] = []  # thought text with no signature yet

    def reasoning(signature: str) -> ReasoningPart:
        part = ReasoningPart(text="".join(pending), signature=signature)
        pending.clear()
        return part

    for where, part in run:
        value = part.get("thoughtSignature")
        if value == SKIP_SIGNATURE:
            value = None
        carried = carrier.unpack(value)
        if carried is not None:
            pending.clear()  # the token holds that text, as the proxy sent it
            out += carried
            value = None
        text = part.get("text")
        if part.get("thought") is True:
            if carried is None:
                pending.append(text or "")
            if value:
                out.append(reasoning(_foreign(value, "thought")))
            continue
        if value:
            empty = text == "" and not any(part.get(k) is not None for k in DATA_FIELDS[1:])
            out.append(reasoning(_foreign(value, "empty" if empty else "next")))
        elif pending:
            out.append(ReasoningPart(text="".join(pending)))
            pending.clear()
        if part.get("functionCall") is not None:
            raw = part["functionCall"]
            out.append(ToolCallPart(id=calls.call(raw, where), name=raw["name"],
                                    arguments=json.dumps(raw.get("args") or {}, ensure_ascii=False)))
            continue
        content = _content_part(part)
        if content is not None:
            out.append(content)
    if any(pending):
        out.append(ReasoningPart(text="".join(pending)))
    return [p for p in out if not (isinstance(p, ReasoningPart) and not carrier.worth_carrying(p))]


def _foreign(value: str, placement: str) -> str:
    """A signature the proxy did not make for this client: kept only inside a Gemini envelope."""
    return value if gemini_from_envelope(value) is not None else gemini_envelope(value, "", placement)


def _user_turn(parts: list[dict[str, Any]], where: str, calls: _Calls) -> list[Message]:
    results: list[Part] = []
    others: list[Part] = []
    for j, part in enumerate(parts):
        if part.get("functionResponse") is not None:
            results.append(_result(part["functionResponse"], f"{where}.{j}", calls))
        elif part.get("thought") is not True:
            content = _content_part(part)
            if content is not None:
                others.append(content)
    out = [Message("tool", results)] if results else []
    if others or not results:
        out.append(Message("user", others))
    return out


def _result(raw: dict[str, Any], where: str, calls: _Calls) -> ToolResultPart:
    response = raw.get("response") or {}
    content: list[ContentPart] = [TextPart(json.dumps(response, ensure_ascii=False))]
    for extra in raw.get("parts") or []:  # multimodal function responses: inline images and files
        part = _content_part(extra) if isinstance(extra, dict) else None
        if isinstance(part, ImagePart | FilePart):
            content.append(part)
    return ToolResultPart(call_id=calls.answer(raw, where), content=content,
                          is_error=isinstance(response, dict) and list(response) == ["error"])


def _content_part(part: dict[str, Any]) -> ContentPart | None:
    if isinstance(part.get("text"), str):
        return TextPart(part["text"]) if part["text"] else None
    inline = part.get("inlineData")
    if isinstance(inline, dict):
        mime, data = str(inline.get("mimeType") or ""), str(inline.get("data") or "")
        if mime.startswith("image/"):
            return ImagePart(data=data, media_type=mime)
        if mime.startswith("audio/"):
            return AudioPart(data=data, format=mime.split("/", 1)[1].split(";")[0])
        return FilePart(data=data, media_type=mime or None)
    file = part.get("fileData")
    if isinstance(file, dict):
        mime, uri = str(file.get("mimeType") or ""), str(file.get("fileUri") or "")
        return ImagePart(url=uri, media_type=mime) if mime.startswith("image/") else \
            FilePart(url=uri, media_type=mime or None)
    code = part.get("executableCode")
    if isinstance(code, dict):
        language = str(code.get("language") or "").lower().replace("language_unspecified", "")
        return TextPart(f"```{language}\n{code.get('code') or ''}\n```")
    result = part.get("codeExecutionResult")
    if isinstance(result, dict):
        return TextPart(f"Code execution result ({result.get('outcome') or 'OUTCOME_UNSPECIFIED'}):\n"
                        f"{result.get('output') or ''}")
    return None
