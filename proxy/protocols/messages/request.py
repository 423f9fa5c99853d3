"""Anthropic Messages requests → the IR (docs/protocols.md §4.1).

Owns reading what Claude Code, the Anthropic SDKs and the Vercel AI SDK send: `system` as a string
or text blocks, content as a string or blocks (text, image, document, thinking, redacted_thinking,
tool_use, tool_result), tools with `input_schema`, every `tool_choice` form, `thinking` and
`output_config.effort`, `output_config.format` (and the beta's `output_format`), `stop_sequences`,
`metadata.user_id`. Tool results, which Anthropic puts in
a user turn, become IR "tool" messages ahead of that turn's other content, and the conversation is
repaired so every tool call has its result (`proxy.ir.repair`). Fields with no IR home — beta
features such as `context_management`, server tools, `cache_control` — are dropped with a log line,
never a 400.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from proxy.errors import invalid
from proxy.ir.reasoning import encrypted_from_signature
from proxy.ir.repair import pair_tool_results
from proxy.ir.request import (
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    Reasoning,
    ReasoningPart,
    Request,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from proxy.protocols.validation import expect, get, get_str_or_list, join, one_of

log = logging.getLogger(__name__)

# `system` inside `messages` is accepted although the API reference points to the top-level
# `system`: the SDK types such messages, and Claude Code sends them mid-conversation to the models
# that take them (with its `mid-conversation-system-…` beta), falling back to <system-reminder>
# text only when a server rejects them. They pass through to Anthropic upstreams as sent and
# become system messages elsewhere.
ROLES = ("user", "assistant", "system")
_IGNORED_BLOCKS = ("server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
                   "mcp_tool_use", "mcp_tool_result", "container_upload", "search_result", "tool_reference")


def validate(body: dict[str, Any], count_tokens: bool = False) -> None:
    """The shape checks the real API makes, with messages that name the field."""
    get(body, "model", str, "", required=True)
    if not count_tokens:
        max_tokens = get(body, "max_tokens", int, "", required=True)
        if max_tokens < 1:
            raise invalid("max_tokens", "must be at least 1")
    messages = get(body, "messages", list, "", required=True)
    for i, msg in enumerate(messages):
        path = join("messages", i)
        expect(msg, dict, path)
        if msg.get("role") is None:
            raise invalid(join(path, "role"), "is required")
        one_of(msg["role"], ROLES, join(path, "role"))
        content = msg.get("content")
        if content is None:
            raise invalid(join(path, "content"), "is required")
        if not isinstance(content, str | list):
            raise invalid(join(path, "content"), "must be a string or an array of content blocks")
        if isinstance(content, list):
            for j, block in enumerate(content):
                bpath = join(join(path, "content"), j)
                expect(block, dict, bpath)
                get(block, "type", str, bpath, required=True)
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise invalid("system", "must be a string or an array of text blocks")
    get(body, "stream", bool, "")
    if body.get("tools") is not None:
        for i, tool in enumerate(expect(body["tools"], list, "tools")):
            expect(tool, dict, join("tools", i))
    if body.get("tool_choice") is not None:
        expect(body["tool_choice"], dict, "tool_choice")
    for key in ("temperature", "top_p"):
        get(body, key, float, "")
    get(body, "top_k", int, "")


def decode(body: dict[str, Any], count_tokens: bool = False) -> Request:
    validate(body, count_tokens)
    req = Request(model=body["model"], stream=bool(body.get("stream")))
    system = body.get("system")
    if system:
        req.messages.append(Message("system", _text_blocks(system, "system")))
    for i, msg in enumerate(body["messages"]):
        for turn in _decode_message(msg, join("messages", i)):
            previous = req.messages[-1] if req.messages else None
            if turn.role == "assistant" and previous is not None and previous.role == "assistant":
                # Anthropic reads consecutive assistant messages as one turn; a client that splits a
                # turn (thinking in one message, its tool calls in the next) still means one, and
                # Chat upstreams need the turn's reasoning on the message that carries its calls.
                previous.parts.extend(turn.parts)
            else:
                req.messages.append(turn)
    req.messages = pair_tool_results(req.messages)
    for i, tool in enumerate(body.get("tools") or []):
        decoded = _decode_tool(tool, join("tools", i))
        if decoded is not None:
            req.tools.append(decoded)
    choice = body.get("tool_choice")
    if choice is not None:
        req.tool_choice, req.parallel_tool_calls = _decode_tool_choice(choice)
    req.max_tokens = get(body, "max_tokens", int, "")
    req.temperature = get(body, "temperature", float, "")
    req.top_p = get(body, "top_p", float, "")
    req.top_k = get(body, "top_k", int, "")
    req.stop = get_str_or_list(body, "stop_sequences", "")
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        req.user = metadata["user_id"]
    output_config = get(body, "output_config", dict, "") or {}
    req.reasoning = _decode_reasoning(body.get("thinking"), output_config)
    # Structured output: GA `output_config.format`, or the `structured-outputs-2025-11-13` beta's
    # top-level `output_format` (litellm sends it for `response_format` on Claude models) — the GA
    # field wins if a client sends both.
    output_format = output_config.get("format")
    if not isinstance(output_format, dict):
        output_format = body.get("output_format")
    if isinstance(output_format, dict) and output_format.get("type") == "json_schema":
        req.response_format = ResponseFormat("json_schema", name="output", schema=output_format.get("schema"))
    dropped = sorted(k for k in body if k in ("context_management", "container", "mcp_servers", "service_tier",
                                              "cache_control", "speed", "inference_geo"))
    if dropped:
        log.info("messages request: not carried to the upstream: %s", ", ".join(dropped))
    return req


def _decode_message(msg: dict[str, Any], path: str) -> list[Message]:
    role = msg["role"]
    content = msg["content"]
    if role == "system":
        return [Message("system", _text_blocks(content, join(path, "content")))]
    if isinstance(content, str):
        return [Message(role, [TextPart(content)] if content else [])]
    parts: list[Part] = []
    results: list[Part] = []
    for j, block in enumerate(content):
        bpath = join(join(path, "content"), j)
        btype = block["type"]
        if btype == "tool_result" and role == "user":
            results.append(_decode_tool_result(block, bpath))
        elif btype == "tool_use" and role == "assistant":
            parts.append(ToolCallPart(id=get(block, "id", str, bpath, required=True),
                                      name=get(block, "name", str, bpath, required=True),
                                      arguments=json.dumps(block.get("input") or {}, ensure_ascii=False)))
        elif btype == "thinking" and role == "assistant":
            parts.append(_thinking_part(block))
        elif btype == "redacted_thinking" and role == "assistant":
            parts.append(ReasoningPart(redacted=str(block.get("data") or "")))
        elif btype in _IGNORED_BLOCKS:
            log.info("messages request: dropping %s block at %s (no equivalent upstream)", btype, bpath)
        else:
            part = _decode_content_block(block, bpath)
            if part is not None:
                parts.append(part)
    out = []
    if results:
        out.append(Message("tool", results))
    if parts or not results:
        out.append(Message(role, parts))
    return out


def _decode_content_block(block: dict[str, Any], path: str) -> ContentPart | None:
    btype = block["type"]
    if btype == "text":
        return TextPart(get(block, "text", str, path, required=True), cache_control=block.get("cache_control"))
    if btype == "image":
        source = get(block, "source", dict, path, required=True)
        stype = source.get("type")
        if stype == "base64":
            return ImagePart(data=str(source.get("data") or ""), media_type=source.get("media_type"))
        if stype == "url":
            return ImagePart(url=get(source, "url", str, join(path, "source"), required=True))
        if stype == "file":
            return ImagePart(file_id=source.get("file_id"))
        raise invalid(join(path, "source.type"), f"must be 'base64', 'url' or 'file', not {stype!r}")
    if btype == "document":
        source = get(block, "source", dict, path, required=True)
        stype = source.get("type")
        if stype == "text":
            return TextPart(str(source.get("data") or ""))
        if stype == "content":
            inner = source.get("content")
            text = inner if isinstance(inner, str) else " ".join(
                str(b.get("text", "")) for b in inner or [] if isinstance(b, dict))
            return TextPart(text)
        if stype == "base64":
            return FilePart(data=str(source.get("data") or ""), media_type=source.get("media_type"),
                            filename=block.get("title"))
        if stype == "url":
            return FilePart(url=source.get("url"), filename=block.get("title"))
        if stype == "file":
            return FilePart(file_id=source.get("file_id"), filename=block.get("title"))
    log.info("messages request: dropping unsupported %r block at %s", btype, path)
    return None


def _decode_tool_result(block: dict[str, Any], path: str) -> ToolResultPart:
    content = block.get("content")
    parts: list[ContentPart] = []
    if isinstance(content, str):
        parts.append(TextPart(content))
    elif isinstance(content, list):
        for j, inner in enumerate(content):
            if isinstance(inner, dict) and isinstance(inner.get("type"), str):
                part = _decode_content_block(inner, join(join(path, "content"), j))
                if part is not None:
                    parts.append(part)
    return ToolResultPart(call_id=get(block, "tool_use_id", str, path, required=True), content=parts,
                          is_error=bool(block.get("is_error")))


def _text_blocks(system: Any, path: str) -> list[Part]:
    if isinstance(system, str):
        return [TextPart(system)] if system else []
    parts: list[Part] = []
    for i, block in enumerate(system):
        expect(block, dict, join(path, i))
        if block.get("type", "text") == "text":
            parts.append(TextPart(get(block, "text", str, join(path, i), required=True)))
    return parts


def _decode_tool(tool: dict[str, Any], path: str) -> Tool | None:
    ttype = tool.get("type")
    if ttype not in (None, "custom"):
        # Anthropic-defined tools (bash_20250124, web_search_20250305, …) are run by Anthropic or
        # declared in Anthropic's own schema; an OpenAI-compatible upstream cannot take them.
        log.info("messages request: dropping Anthropic-defined tool %r (%s)", tool.get("name"), ttype)
        return None
    return Tool(name=get(tool, "name", str, path, required=True), description=tool.get("description"),
                parameters=tool.get("input_schema") or {"type": "object", "properties": {}},
                strict=tool.get("strict"), cache_control=tool.get("cache_control"))


def _decode_tool_choice(choice: dict[str, Any]) -> tuple[ToolChoice, bool | None]:
    ctype = one_of(choice.get("type"), ("auto", "any", "tool", "none"), "tool_choice.type")
    parallel = False if choice.get("disable_parallel_tool_use") else None
    if ctype == "tool":
        return ToolChoice("tool", name=get(choice, "name", str, "tool_choice", required=True)), parallel
    return ToolChoice({"auto": "auto", "any": "required", "none": "none"}[ctype]), parallel  # type: ignore[arg-type]


def _decode_reasoning(thinking: Any, output_config: Any) -> Reasoning | None:
    effort = output_config.get("effort") if isinstance(output_config, dict) else None
    if not isinstance(thinking, dict):
        return Reasoning(effort=effort) if effort else None
    ttype = thinking.get("type")
    if ttype == "disabled":
        return Reasoning(enabled=False)
    budget = thinking.get("budget_tokens")
    return Reasoning(enabled=True, effort=effort, budget_tokens=budget if isinstance(budget, int) else None)


def _thinking_part(block: dict[str, Any]) -> ReasoningPart:
    """A thinking block; one whose signature wraps a Responses upstream's encrypted reasoning gets
    that back as `encrypted` (proxy.ir.reasoning), so it returns to the upstream intact."""
    text = str(block.get("thinking") or "")
    signature = block.get("signature") if isinstance(block.get("signature"), str) else None
    encrypted = encrypted_from_signature(signature)
    if encrypted is not None:
        return ReasoningPart(text=text, encrypted=encrypted)
    return ReasoningPart(text=text, signature=signature)


def conversation_key(body: dict[str, Any], headers: Mapping[str, str]) -> str | None:
    """What names a Messages client's conversation: Claude Code's session (2.1 sends the header
    `X-Claude-Code-Session-Id` on every request of a session, subagents included), else
    `metadata.user_id` (which Claude Code fills with the user, account and session ids)."""
    session = headers.get("x-claude-code-session-id")
    if session:
        return f"session:{session}"
    metadata = body.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    return f"user_id:{user}" if isinstance(user, str) and user else None
