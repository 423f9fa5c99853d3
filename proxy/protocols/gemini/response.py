"""Gemini `GenerateContentResponse` bodies from the IR, for a Gemini client: the whole answer, and
the part shapes the stream encoder shares.

Owns the mapping of answer parts: text → `{"text"}`; reasoning → `{"text", "thought": true}` (left
out when the client did not ask for thoughts); a tool call → one `{"functionCall": {"name", "args",
"id"}}` with the arguments as an object; a refusal → text. The reasoning's opaque tokens travel in
a `thoughtSignature` on the next non-thought part, or on an empty text part at the end
(`proxy.protocols.gemini.carrier` says why there, and in what form).

The call `id` is always sent. The Gemini API itself sends one only sometimes, but both SDKs type it
(`FunctionCall.id`) and gemini-cli keeps a given id (prefixed `name__`) and returns it on the
call and on its functionResponse, so the proxy gets back exactly the id the upstream made (the
prompt cache of the next request then matches) instead of matching by name and order.
Citations: `citationMetadata.citations[]` with `uri`, `title` and byte offsets (`startIndex`,
`endIndex`) into the candidate's text, as Google documents them.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from proxy.ir import response as ir
from proxy.ir.custom_calls import function_arguments
from proxy.ir.request import Citation, ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import Response, Usage
from proxy.protocols.gemini import carrier
from proxy.protocols.gemini.vocabulary import FINISH_TO_GEMINI, usage_to_gemini


def new_id() -> str:
    return uuid.uuid4().hex[:24]


def args_object(arguments: str) -> dict[str, Any]:
    """Tool arguments as the object `functionCall.args` must be: text that is not a JSON object
    (an upstream's broken arguments) becomes {} rather than a body the SDKs cannot read."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def function_call(part: ToolCallPart) -> dict[str, Any]:
    call: dict[str, Any] = {"name": part.name, "args": args_object(function_arguments(part))}
    if part.id:
        call["id"] = part.id
    return {"functionCall": call}


def finish_reason(reason: str | None) -> str:
    return FINISH_TO_GEMINI.get(reason or ir.STOP, "STOP")


def citation_entry(citation: Citation, text: str, offset: int) -> dict[str, Any] | None:
    """A citation of text `text` that starts `offset` bytes into the candidate's text."""
    if not citation.url and not citation.title:
        return None
    entry: dict[str, Any] = {}
    if citation.start is not None and citation.end is not None:
        entry["startIndex"] = offset + len(text[:citation.start].encode("utf-8"))
        entry["endIndex"] = offset + len(text[:citation.end].encode("utf-8"))
    if citation.url:
        entry["uri"] = citation.url
    if citation.title:
        entry["title"] = citation.title
    return entry


def candidate(parts: list[dict[str, Any]], reason: str, citations: list[dict[str, Any]]) -> dict[str, Any]:
    """candidates[0]. A content filter with nothing said has no `content`, as Google's SAFETY
    answers have none; any other end gets at least an empty text part, so the SDKs' chat helpers
    (google-genai `chats._validate_response`) keep the turn."""
    out: dict[str, Any] = {}
    if parts or reason != "SAFETY":
        out["content"] = {"role": "model", "parts": parts or [{"text": ""}]}
    out["finishReason"] = reason
    out["index"] = 0
    if citations:
        out["citationMetadata"] = {"citations": citations}
    return out


def encode(resp: Response, model: str, include_thoughts: bool = True) -> dict[str, Any]:
    """The whole answer (Response.error is the caller's: it answers with an error body instead)."""
    parts: list[dict[str, Any]] = []
    held: list[ReasoningPart] = []  # reasoning whose tokens wait for the next non-thought part
    citations: list[dict[str, Any]] = []
    offset = 0  # bytes of text so far, for citation offsets
    for p in resp.output:
        if isinstance(p, ReasoningPart):
            if include_thoughts and p.text:
                parts.append({"text": p.text, "thought": True})
            if carrier.worth_carrying(p):
                held.append(p)
            continue
        part: dict[str, Any]
        if isinstance(p, ToolCallPart):
            part = function_call(p)
        elif isinstance(p, TextPart | RefusalPart):
            if not p.text and not held:
                continue
            part = {"text": p.text}
            if isinstance(p, TextPart):
                citations += [c for c in (citation_entry(c, p.text, offset) for c in p.citations) if c]
            offset += len(p.text.encode("utf-8"))
        else:
            continue
        if held:
            part["thoughtSignature"] = carrier.pack(held)
            held = []
        parts.append(part)
    if held:
        parts.append({"text": "", "thoughtSignature": carrier.pack(held)})
    return {
        "candidates": [candidate(parts, finish_reason(resp.finish_reason), citations)],
        "usageMetadata": usage_to_gemini(resp.usage or Usage()),
        "modelVersion": model,
        "responseId": resp.id or new_id(),
    }
