"""The request a Gemini upstream gets, from the IR: `contents`, `systemInstruction`, `tools`,
`toolConfig`, `generationConfig` (protocols.md §16.1), the body of `:generateContent` /
`:streamGenerateContent` (the URL names the model: `path_for` in `__init__`).

Owns, beside the field mapping:
- Roles: system and developer messages before the first turn are `systemInstruction`; one later in
  the conversation (Claude Code sends them) becomes user text — *Gemini has no system role in
  `contents`*. Consecutive turns of one role are merged, so a step's function results are one user
  content, which is what Gemini wants after parallel calls.
- Function results: `functionResponse` with the call's `name` (found from the call id: Gemini
  matches results to calls by name and order) and its `id`; the result as the JSON object it is, or
  `{"result": text}` (`response` must be an object).
- Thought signatures (protocols.md §9.6): a reasoning part carrying a Gemini envelope from this
  upstream and model gets its signature back on the part it came on; anything else — a signature of
  another origin, another upstream's reasoning — is left out, and the first call of each step of
  the current turn that has none gets the validator-skip value (`signatures.sign_current_turn`).
- Thinking: `thinkingLevel` for Gemini 3 models, `thinkingBudget` for the ones before; thoughts
  are always asked for (`includeThoughts`) when reasoning is, so the client sees them.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from proxy.config import Upstream
from proxy.ir.custom_calls import custom_tool_as_function, function_arguments
from proxy.ir.reasoning import gemini_from_envelope, gemini_origin
from proxy.ir.request import (
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    RefusalPart,
    Request,
    TextPart,
    Tool,
    ToolCallPart,
    ToolResultPart,
    budget_for_effort,
)
from proxy.protocols.gemini.schema import openapi_subset
from proxy.protocols.gemini.signatures import sign_current_turn

log = logging.getLogger(__name__)

# Request fields of a Gemini client's own that the IR has no place for (Request.extras), which go
# back to a Gemini upstream as they came; another protocol's extras never do.
GEMINI_EXTRAS = ("safetySettings", "cachedContent", "labels")
CALLING_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE", "tool": "ANY"}
LEVELS = {"none": "low", "minimal": "low", "low": "low", "medium": "high", "high": "high", "xhigh": "high",
          "max": "high"}


def encode(req: Request, model: str, upstream: Upstream) -> dict[str, Any]:
    system, turns = _split_system(req.messages)
    origin = gemini_origin(upstream.name, model)
    names = {p.id: p.name for m in req.messages for p in m.parts if isinstance(p, ToolCallPart)}
    contents: list[dict[str, Any]] = []
    for message in turns:
        role, parts = _content(message, names, origin, model)
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    body: dict[str, Any] = {"contents": sign_current_turn(contents)}
    if system:
        body["systemInstruction"] = {"parts": [{"text": t} for t in system]}
    tools = [_declaration(t, upstream.tool_schema == "openapi") for t in req.tools]
    extra_tools = [t for t in req.extras.get("tools") or [] if isinstance(t, dict) and "type" not in t]
    if tools or extra_tools:
        body["tools"] = ([{"functionDeclarations": tools}] if tools else []) + extra_tools
    tool_config = _tool_config(req)
    if tool_config:
        body["toolConfig"] = tool_config
    generation = _generation(req, model, upstream)
    if generation:
        body["generationConfig"] = generation
    for key in GEMINI_EXTRAS:
        if key in req.extras:
            body[key] = req.extras[key]
    return body


def _split_system(messages: list[Message]) -> tuple[list[str], list[Message]]:
    """The leading system and developer messages' text, and the conversation after them."""
    system: list[str] = []
    start = 0
    for message in messages:
        if message.role not in ("system", "developer"):
            break
        system += [p.text for p in message.parts if isinstance(p, TextPart) and p.text]
        start += 1
    return system, messages[start:]


def _content(message: Message, names: dict[str, str], origin: str, model: str) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "assistant":
        return "model", _model_parts(message.parts, origin, model)
    if message.role in ("system", "developer"):  # mid-conversation: Gemini has no system role in contents
        texts = [p.text for p in message.parts if isinstance(p, TextPart) and p.text]
        return "user", [{"text": "System instruction: " + "\n".join(texts)}] if texts else []
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, ToolResultPart):
            parts.append(_function_response(part, names))
        else:
            parts += _user_part(part)
    return "user", parts


def _user_part(part: Part) -> list[dict[str, Any]]:
    if isinstance(part, TextPart):
        return [{"text": part.text}] if part.text else []
    if isinstance(part, ImagePart):
        if part.data is not None:
            return [{"inlineData": {"mimeType": part.media_type or "image/png", "data": part.data}}]
        if part.url:
            if part.url.startswith("data:") and ";base64," in part.url:
                mime, data = part.url[5:].split(";base64,", 1)
                return [{"inlineData": {"mimeType": mime or "image/png", "data": data}}]
            return [{"fileData": {"mimeType": part.media_type or "image/jpeg", "fileUri": part.url}}]
        return []
    if isinstance(part, FilePart):
        if part.data is not None:
            return [{"inlineData": {"mimeType": part.media_type or "application/pdf", "data": part.data}}]
        if part.url:
            return [{"fileData": {"mimeType": part.media_type or "application/pdf", "fileUri": part.url}}]
        log.info("gemini upstream: a file by id (%s) has no Gemini part; left out", part.file_id)
        return []
    if isinstance(part, AudioPart):
        return [{"inlineData": {"mimeType": f"audio/{part.format}", "data": part.data}}]
    return []


def _function_response(part: ToolResultPart, names: dict[str, str]) -> dict[str, Any]:
    text = part.text()
    try:
        value = json.loads(text) if text.strip() else None
    except ValueError:
        value = None
    response = value if isinstance(value, dict) else {"result": text}
    if part.is_error and not isinstance(value, dict):
        response = {"error": text}
    return {"functionResponse": {"id": part.call_id, "name": names.get(part.call_id, part.call_id),
                                 "response": response}}


def _model_parts(parts: list[Part], origin: str, model: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pending: str | None = None  # a signature for the next part
    for part in parts:
        if isinstance(part, ReasoningPart):
            opened = gemini_from_envelope(part.signature)
            if opened is None or not _same_origin(opened[1], origin, model):
                continue  # another upstream's reasoning, or a signature this one did not issue
            signature, _, placement = opened
            if part.text or placement == "thought":
                out.append({"text": part.text, "thought": True})
            if placement == "thought":
                out[-1]["thoughtSignature"] = signature
            elif placement == "empty":
                out.append({"text": "", "thoughtSignature": signature})
            elif placement == "prev" and out:
                out[-1]["thoughtSignature"] = signature
            else:
                pending = signature
            continue
        if isinstance(part, TextPart | RefusalPart):
            if not part.text:
                continue
            encoded: dict[str, Any] = {"text": part.text}
        elif isinstance(part, ToolCallPart):
            args = _arguments(part)
            encoded = {"functionCall": {"id": part.id, "name": part.name, "args": args}}
        else:
            continue
        if pending is not None:
            encoded["thoughtSignature"], pending = pending, None
        out.append(encoded)
    return out


def _same_origin(origin: str, expected: str, model: str) -> bool:
    """A signature goes back only where it was issued: this upstream and this model (the envelope
    says the answering `modelVersion`, which may spell the model asked for with a version suffix)."""
    if origin == expected:
        return True
    upstream, _, version = origin.partition("/")
    asked_upstream = expected.partition("/")[0]
    return upstream == asked_upstream and bool(version) and (version.startswith(model) or model.startswith(version))


def _arguments(call: ToolCallPart) -> dict[str, Any]:
    text = function_arguments(call)
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _declaration(tool: Tool, openapi: bool) -> dict[str, Any]:
    description, parameters = tool.description, tool.parameters
    if tool.kind == "custom":
        description, parameters = custom_tool_as_function(tool)
    declaration: dict[str, Any] = {"name": tool.name}
    if description:
        declaration["description"] = description
    if parameters:
        if openapi:
            declaration["parameters"] = openapi_subset(parameters)
        else:
            declaration["parametersJsonSchema"] = parameters
    return declaration


def _tool_config(req: Request) -> dict[str, Any]:
    config = dict(req.extras.get("toolConfig") or {}) if isinstance(req.extras.get("toolConfig"), dict) else {}
    choice = req.tool_choice
    if choice is not None and req.tools:
        calling: dict[str, Any] = {"mode": CALLING_MODES[choice.mode]}
        allowed = [choice.name] if choice.mode == "tool" and choice.name else choice.allowed
        if allowed and calling["mode"] == "ANY":
            calling["allowedFunctionNames"] = list(allowed)
        config["functionCallingConfig"] = calling
    return config


def _generation(req: Request, model: str, upstream: Upstream) -> dict[str, Any]:
    extra = req.extras.get("generationConfig")
    config: dict[str, Any] = dict(extra) if isinstance(extra, dict) else {}
    for key, value in (("temperature", req.temperature), ("topP", req.top_p), ("topK", req.top_k),
                       ("seed", req.seed), ("presencePenalty", req.presence_penalty),
                       ("frequencyPenalty", req.frequency_penalty)):
        if value is not None:
            config[key] = value
    max_tokens = req.max_tokens
    if upstream.max_output_tokens is not None:
        max_tokens = min(max_tokens or upstream.max_output_tokens, upstream.max_output_tokens)
    if max_tokens is not None:
        config["maxOutputTokens"] = max_tokens
    if req.stop:
        config["stopSequences"] = list(req.stop)
    fmt = req.response_format
    if fmt is not None and fmt.type != "text":
        config["responseMimeType"] = "application/json"
        if fmt.type == "json_schema" and fmt.schema is not None:
            if upstream.tool_schema == "openapi":
                config["responseSchema"] = openapi_subset(fmt.schema)
            else:
                config["responseJsonSchema"] = fmt.schema
    thinking = _thinking(req, model)
    if thinking:
        config["thinkingConfig"] = thinking
    return config


def _thinking(req: Request, model: str) -> dict[str, Any]:
    reasoning = req.reasoning
    if reasoning is None:
        return {}
    if reasoning.enabled is False or reasoning.effort == "none":
        # Gemini 3 cannot turn thinking off: its lowest level; before it, a budget of 0.
        return {"thinkingLevel": "low"} if _gemini3(model) else {"thinkingBudget": 0}
    if _gemini3(model):
        effort = reasoning.effort or ("high" if (reasoning.budget_tokens or 0) > 8192 else "low")
        return {"thinkingLevel": LEVELS.get(effort, "high"), "includeThoughts": True}
    budget = reasoning.budget_tokens if reasoning.budget_tokens is not None else budget_for_effort(reasoning.effort)
    return {"thinkingBudget": budget, "includeThoughts": True}


def _gemini3(model: str) -> bool:
    return model.removeprefix("models/").startswith("gemini-3")
