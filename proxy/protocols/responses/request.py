"""OpenAI Responses requests → the IR (docs/protocols.md §5.1).

Owns reading what Codex, openai-python and the Vercel AI SDK send: `input` as a string or items —
messages (user / assistant / system / developer, with input_text, output_text, input_image,
input_file and refusal parts), function_call and function_call_output, custom_tool_call and its
output, reasoning — plus `instructions`, flat function tools and custom (freeform) tools,
`tool_choice`, `max_output_tokens`, `reasoning`, `text.format`. Consecutive assistant-side items
(message, reasoning, calls) become one assistant turn, as Chat needs them. Hosted tools the upstream
cannot run and item types with no equivalent are dropped with a log line, never a 400; what Codex
sends that has no effect here (`store`, `include`, `prompt_cache_key`, `client_metadata`,
`reasoning: null`, `text.verbosity`, `truncation`, …) is accepted.

`previous_response_id` and `item_reference` are resolved before decoding
(`proxy.conversations.responses`), so `decode` gets the full item list.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from proxy.errors import invalid
from proxy.ir.reasoning import anthropic_from_encrypted, gemini_from_envelope
from proxy.ir.repair import pair_tool_results
from proxy.ir.request import (
    AudioPart,
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    Reasoning,
    ReasoningPart,
    RefusalPart,
    Request,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from proxy.protocols.validation import expect, get, get_objects, get_text, join, one_of, split_data_url

log = logging.getLogger(__name__)

ROLES = ("user", "assistant", "system", "developer")
ASSISTANT_ITEMS = ("reasoning", "function_call", "custom_tool_call")
OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output")


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's `input` as items (a string is one user message)."""
    inp = body.get("input")
    if inp is None:
        return []
    if isinstance(inp, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": inp}]}]
    return [dict(item) for item in inp]


def validate(body: dict[str, Any]) -> None:
    get(body, "model", str, "", required=True)
    inp = body.get("input")
    if inp is None and body.get("previous_response_id") is None:
        raise invalid("input", "is required")
    if inp is not None and not isinstance(inp, str | list):
        raise invalid("input", "must be a string or an array of input items")
    if isinstance(inp, list):
        for i, item in enumerate(inp):
            validate_item(item, join("input", i))
    get(body, "instructions", str, "")
    get(body, "previous_response_id", str, "")
    get(body, "stream", bool, "")
    get(body, "max_output_tokens", int, "")
    for key in ("temperature", "top_p"):
        get(body, key, float, "")
    if body.get("tools") is not None:
        for i, tool in enumerate(expect(body["tools"], list, "tools")):
            expect(tool, dict, join("tools", i))
            get(tool, "type", str, join("tools", i), required=True)
    for key in ("reasoning", "text"):
        get(body, key, dict, "")


def validate_item(item: Any, path: str) -> None:
    expect(item, dict, path)
    itype = item.get("type")
    if itype is None and "role" not in item:
        raise invalid(join(path, "type"), "is required")
    if itype in (None, "message"):
        if item.get("role") is None:
            raise invalid(join(path, "role"), "is required")
        one_of(item["role"], ROLES, join(path, "role"))
        content = item.get("content")
        if not isinstance(content, str | list):
            raise invalid(join(path, "content"), "must be a string or an array of content parts")
        if isinstance(content, list):
            for j, part in enumerate(content):
                expect(part, dict, join(join(path, "content"), j))
    elif itype in ("function_call", "custom_tool_call"):
        get(item, "call_id", str, path, required=True)
        get(item, "name", str, path, required=True)
    elif itype in OUTPUT_ITEMS:
        get(item, "call_id", str, path, required=True)
    elif itype == "item_reference":
        get(item, "id", str, path, required=True)


def decode(body: dict[str, Any], items: list[dict[str, Any]]) -> Request:
    """`items`: the whole conversation — earlier responses' items and this request's own input."""
    validate(body)
    req = Request(model=body["model"], stream=bool(body.get("stream")))
    if body.get("instructions"):
        req.messages.append(Message("system", [TextPart(body["instructions"])]))
    assistant: Message | None = None
    for i, item in enumerate(items):
        path = join("input", i)
        itype = item.get("type") or "message"
        role = item.get("role")
        if itype in ASSISTANT_ITEMS or (itype == "message" and role == "assistant"):
            if assistant is None:
                assistant = Message("assistant")
                req.messages.append(assistant)
            assistant.parts.extend(_assistant_parts(item, itype, path))
            continue
        assistant = None
        if itype == "message":
            req.messages.append(Message(role, _content(item.get("content"), join(path, "content"))))  # type: ignore[arg-type]
        elif itype in OUTPUT_ITEMS:
            result = ToolResultPart(call_id=item["call_id"], content=_output(item.get("output"), path),
                                    kind="custom" if itype == "custom_tool_call_output" else "function")
            req.messages.append(Message("tool", [result]))
        else:
            log.info("responses request: dropping %s item at %s (no equivalent upstream)", itype, path)
    req.messages = pair_tool_results(req.messages)
    for i, tool in enumerate(body.get("tools") or []):
        decoded = _decode_tool(tool, join("tools", i))
        if decoded is not None:
            req.tools.append(decoded)
    req.tool_choice = _decode_tool_choice(body.get("tool_choice"))
    req.parallel_tool_calls = get(body, "parallel_tool_calls", bool, "")
    req.max_tokens = get(body, "max_output_tokens", int, "")
    req.temperature = get(body, "temperature", float, "")
    req.top_p = get(body, "top_p", float, "")
    req.user = get(body, "user", str, "") or get(body, "safety_identifier", str, "")
    req.metadata = get(body, "metadata", dict, "")
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and (reasoning.get("effort") or reasoning.get("summary")):
        effort = reasoning.get("effort")
        req.reasoning = Reasoning(effort=effort, summary=reasoning.get("summary"),
                                  enabled=False if effort == "none" else None)
    req.response_format = _decode_format((body.get("text") or {}).get("format"))
    return req


def _assistant_parts(item: dict[str, Any], itype: str, path: str) -> list[Part]:
    if itype == "function_call":
        arguments = item.get("arguments")
        return [ToolCallPart(id=item["call_id"], name=item["name"], item_id=item.get("id"),
                             arguments=arguments if isinstance(arguments, str) else "{}")]
    if itype == "custom_tool_call":
        return [ToolCallPart(id=item["call_id"], name=item["name"], arguments=str(item.get("input") or ""),
                             kind="custom", item_id=item.get("id"))]
    if itype == "reasoning":
        raw = [get_text(p, "text", join(path, "content")) for p in get_objects(item, "content", path)]
        summary = [get_text(p, "text", join(path, "summary")) for p in get_objects(item, "summary", path)]
        encrypted = get(item, "encrypted_content", str, path)
        text, item_id = "\n\n".join(raw or summary), get(item, "id", str, path)
        if gemini_from_envelope(encrypted) is not None:  # a Gemini signature, in the proxy's envelope
            return [ReasoningPart(text=text, signature=encrypted, id=item_id)]
        restored = anthropic_from_encrypted(encrypted)  # an Anthropic signature the proxy wrapped
        if restored is not None:
            return [ReasoningPart(text=text, signature=restored[0], redacted=restored[1], id=item_id)]
        return [ReasoningPart(text=text, encrypted=encrypted, id=item_id)]
    content = item.get("content")
    return list(_content(content, join(path, "content"), assistant=True))


def _content(content: Any, path: str, assistant: bool = False) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    parts: list[Part] = []
    for j, part in enumerate(content or []):
        decoded = _content_part(part, join(path, j), assistant)
        if decoded is not None:
            parts.append(decoded)
    return parts


def _content_part(part: dict[str, Any], path: str, assistant: bool = False) -> Part | None:
    ptype = part.get("type")
    if ptype in ("input_text", "output_text", "text"):
        return TextPart(str(part.get("text") or ""))
    if ptype == "refusal" and assistant:
        return RefusalPart(str(part.get("refusal") or ""))
    if ptype == "input_image":
        url = part.get("image_url")
        inline = split_data_url(url) if isinstance(url, str) else None
        if inline:
            return ImagePart(media_type=inline[0], data=inline[1], detail=part.get("detail"))
        return ImagePart(url=url if isinstance(url, str) else None, file_id=part.get("file_id"),
                         detail=part.get("detail"))
    if ptype == "input_file":
        data = part.get("file_data")
        inline = split_data_url(data) if isinstance(data, str) else None
        return FilePart(data=inline[1] if inline else data, media_type=inline[0] if inline else None,
                        filename=part.get("filename"), file_id=part.get("file_id"), url=part.get("file_url"))
    if ptype == "input_audio":
        audio = part.get("input_audio") or {}
        return AudioPart(data=str(audio.get("data") or ""), format=str(audio.get("format") or "wav"))
    log.info("responses request: dropping %r content part at %s", ptype, path)
    return None


def _output(output: Any, path: str) -> list[ContentPart]:
    """A tool's output: a string, or input_text / input_image / input_file parts."""
    if isinstance(output, str):
        return [TextPart(output)]
    if output is not None and not isinstance(output, list):
        raise invalid(join(path, "output"), "must be a string or an array of content parts")
    parts: list[ContentPart] = []
    for j, part in enumerate(output or []):
        if isinstance(part, dict):
            decoded = _content_part(part, join(join(path, "output"), j))
            if isinstance(decoded, TextPart | ImagePart | FilePart | AudioPart):
                parts.append(decoded)
    return parts


def _decode_tool(tool: dict[str, Any], path: str) -> Tool | None:
    ttype = tool["type"]
    if ttype == "function":
        return Tool(name=get(tool, "name", str, path, required=True), description=tool.get("description"),
                    parameters=tool.get("parameters"), strict=tool.get("strict"))
    if ttype == "custom":
        return Tool(name=get(tool, "name", str, path, required=True), description=get(tool, "description", str, path),
                    kind="custom", format=get(tool, "format", dict, path))
    # Hosted tools (web_search, file_search, code_interpreter, image_generation, mcp, …) run inside
    # OpenAI; a Chat Completions upstream cannot run them, so the model simply does not get them.
    log.info("responses request: leaving out hosted tool %r the upstream cannot run", ttype)
    return None


def _decode_tool_choice(choice: Any) -> ToolChoice | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        return ToolChoice(one_of(choice, ("auto", "none", "required"), "tool_choice"))  # type: ignore[arg-type]
    expect(choice, dict, "tool_choice")
    ctype = choice.get("type")
    if ctype in ("function", "custom"):
        return ToolChoice("tool", name=get(choice, "name", str, "tool_choice", required=True), kind=ctype)
    if ctype == "allowed_tools":
        names = [str(t.get("name")) for t in choice.get("tools") or [] if isinstance(t, dict) and t.get("name")]
        return ToolChoice("required" if choice.get("mode") == "required" else "auto", allowed=names)
    log.info("responses request: tool_choice %r names a hosted tool; using auto", ctype)
    return ToolChoice("auto")


def _decode_format(fmt: Any) -> ResponseFormat | None:
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    ftype = one_of(fmt.get("type"), ("text", "json_object", "json_schema"), "text.format.type")
    if ftype == "json_object":
        return ResponseFormat("json_object")
    return ResponseFormat("json_schema", name=fmt.get("name"), schema=fmt.get("schema"), strict=fmt.get("strict"),
                          description=fmt.get("description"))


def conversation_key(body: dict[str, Any], headers: Mapping[str, str]) -> str | None:
    """What names a Responses client's conversation: `prompt_cache_key` (Codex CLI sends its
    conversation id there on every turn). A `previous_response_id` chain is followed through the
    response store instead (ResponsesConversation.previous_account)."""
    value = body.get("prompt_cache_key")
    return f"prompt_cache_key:{value}" if isinstance(value, str) and value else None
