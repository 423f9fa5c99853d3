"""Anthropic Messages requests for `protocol: messages` upstreams, built from the IR.

Owns the upstream side of the Messages request (docs/protocols.md §4.1): system prompts lifted out of
the conversation into `system`; tool results as `tool_result` blocks at the head of a user turn;
consecutive turns of the same role merged so that turns alternate, starting with the user; images
and PDFs as `image` / `document` blocks; tools with `input_schema`; `tool_choice` and parallel
calls; `max_tokens` always set; a request for reasoning as `thinking` with a budget; `stop` as
`stop_sequences`; a JSON schema as `output_config.format`, and any JSON object — which Messages has
no mode for — as a forced tool whose call comes back as the answer's text (`proxy.ir.json_tool`).
Thinking blocks go back only with a real signature — one the proxy minted
(`proxy.ir.reasoning`) or none at all would be rejected by Anthropic as invalid.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from proxy.config import Upstream
from proxy.ir.custom_calls import custom_tool_as_function
from proxy.ir.json_tool import wants_json_tool, with_json_tool
from proxy.ir.reasoning import is_minted
from proxy.ir.request import (
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    RefusalPart,
    Request,
    TextPart,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    budget_for_effort,
)
from proxy.ir.request import Reasoning as ReasoningConfig

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; used when neither client nor config gives one
MIN_THINKING_BUDGET = 1024  # the API's floor for thinking.budget_tokens
_TOOL_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def encode(req: Request, model: str, upstream: Upstream) -> dict[str, Any]:
    """Build the Messages body for an Anthropic upstream from the IR."""
    if wants_json_tool(req):  # any JSON object: Messages has no such mode, a forced tool carries it
        req = with_json_tool(req)
    body: dict[str, Any] = {"model": model}
    system = [block for m in req.messages if m.role in ("system", "developer") for block in _text_blocks(m)]
    if system:
        body["system"] = system
    body["messages"] = _conversation([m for m in req.messages if m.role not in ("system", "developer")])
    cap = upstream.max_output_tokens
    max_tokens = req.max_tokens or cap or DEFAULT_MAX_TOKENS
    body["max_tokens"] = min(max_tokens, cap) if cap else max_tokens
    thinking = _thinking(req.reasoning)
    if thinking is not None and _unsigned_tool_turn(body["messages"]):
        # With thinking on, Anthropic requires the assistant turn that called tools to open with its
        # signed thinking block. A client of another protocol (Chat) could not keep it, so this
        # request goes without thinking rather than fail with a 400.
        log.info("thinking turned off: the last tool-calling assistant turn has no signed thinking block")
        thinking = None
    if thinking is not None and req.tools and req.tool_choice is not None and req.tool_choice.mode in ("tool",
                                                                                                       "required"):
        # Anthropic refuses thinking with a forced tool (tool_choice any or tool): the forced call —
        # the client's own, or the JSON answer's — is what was asked for, so thinking gives way.
        log.info("thinking turned off: Anthropic does not take it with a tool_choice that forces a tool")
        thinking = None
    if thinking is not None:
        budget = thinking.get("budget_tokens", 0)
        # The budget must stay below max_tokens, or Anthropic refuses the request.
        body["max_tokens"] = max(body["max_tokens"], budget + MIN_THINKING_BUDGET)
        body["thinking"] = thinking
    if req.tools:
        body["tools"] = [_encode_tool(t) for t in req.tools]
        choice = _encode_tool_choice(req.tool_choice, req.parallel_tool_calls)
        if choice is not None:
            body["tool_choice"] = choice
    if req.stop:
        body["stop_sequences"] = req.stop
    sampling = {"temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k}
    if thinking is not None and any(v is not None for v in sampling.values()):
        # With thinking on, Anthropic accepts no temperature other than 1 and no top_k.
        log.info("dropping temperature/top_p/top_k for an Anthropic request with thinking enabled")
    else:
        body.update({k: v for k, v in sampling.items() if v is not None})
    if req.user:
        body["metadata"] = {"user_id": req.user}
    if req.response_format is not None and req.response_format.type == "json_schema":
        body["output_config"] = {"format": {"type": "json_schema", "schema": req.response_format.schema or {}}}
    if req.stream:
        body["stream"] = True
    _log_dropped(req)
    return body


def _log_dropped(req: Request) -> None:
    dropped = [name for name in ("seed", "presence_penalty", "frequency_penalty") if getattr(req, name) is not None]
    dropped += sorted(req.extras)  # the client protocol's own fields with no Messages equivalent
    if dropped:
        log.info("anthropic upstream: dropping %s (no Messages equivalent)", ", ".join(dropped))


def _unsigned_tool_turn(turns: list[dict[str, Any]]) -> bool:
    """The last assistant turn calls tools without opening with a (redacted) thinking block."""
    assistant = next((t for t in reversed(turns) if t["role"] == "assistant"), None)
    if assistant is None or not any(b["type"] == "tool_use" for b in assistant["content"]):
        return False
    return assistant["content"][0]["type"] not in ("thinking", "redacted_thinking")


def tool_use_id(call_id: str) -> str:
    """Anthropic accepts tool ids matching ^[a-zA-Z0-9_-]+$; Chat and Responses ids may not."""
    return _TOOL_ID_CHARS.sub("_", call_id) or "toolu_missing"


# ------------------------------------------------------------ conversation


def _conversation(messages: list[Message]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for msg in messages:
        role = "assistant" if msg.role == "assistant" else "user"
        blocks = _assistant_blocks(msg) if role == "assistant" else _user_blocks(msg)
        if not blocks:
            continue  # an empty turn is an error upstream; dropping it keeps the rest valid
        if turns and turns[-1]["role"] == role:
            _merge(turns[-1]["content"], blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if turns and turns[0]["role"] != "user":
        # A conversation must open with the user; a history cut short may start with the assistant.
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(conversation continues)"}]})
    return turns


def _merge(into: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> None:
    """Append a turn's blocks to the previous same-role turn, keeping tool results first."""
    results = [b for b in blocks if b["type"] == "tool_result"]
    others = [b for b in blocks if b["type"] != "tool_result"]
    head = [b for b in into if b["type"] == "tool_result"]
    into[:] = head + results + [b for b in into if b["type"] != "tool_result"] + others


def _user_blocks(msg: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in msg.parts:
        if isinstance(part, ToolResultPart):
            blocks.append(_tool_result(part))
        elif isinstance(part, TextPart | ImagePart | FilePart):
            block = _content_block(part)
            if block is not None:
                blocks.append(block)
    return blocks


def _assistant_blocks(msg: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in msg.parts:
        if isinstance(part, ReasoningPart):
            block = _thinking_block(part)
            if block is not None:
                blocks.append(block)
        elif isinstance(part, TextPart | RefusalPart) and part.text:
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ToolCallPart):
            blocks.append({"type": "tool_use", "id": tool_use_id(part.id), "name": part.name,
                           "input": _tool_input(part)})
    return blocks


def _thinking_block(part: ReasoningPart) -> dict[str, Any] | None:
    if part.redacted:
        return {"type": "redacted_thinking", "data": part.redacted}
    if part.signature and not is_minted(part.signature):
        return {"type": "thinking", "thinking": part.text, "signature": part.signature}
    if part.text or part.encrypted:
        log.info("dropping a reasoning block without an Anthropic signature (it came from another upstream)")
    return None


def _tool_input(call: ToolCallPart) -> dict[str, Any]:
    if call.kind == "custom":  # custom tools travel as a function taking one string, as on Chat upstreams
        return {"input": call.arguments}
    try:
        parsed = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    log.info("tool call %s had arguments that are not a JSON object; sent wrapped as {\"input\": …}", call.id)
    return {"input": call.arguments}


def _tool_result(part: ToolResultPart) -> dict[str, Any]:
    content = [b for b in (_content_block(p) for p in part.content) if b is not None]
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id(part.call_id),
                             "content": content if content else ""}
    if part.is_error:
        block["is_error"] = True
    return block


def _text_blocks(msg: Message) -> list[dict[str, Any]]:
    return [b for b in (_content_block(p) for p in msg.parts if isinstance(p, TextPart)) if b is not None]


def _content_block(part: ContentPart) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        if not part.text:
            return None  # Anthropic rejects empty text blocks
        block: dict[str, Any] = {"type": "text", "text": part.text}
        if part.cache_control:
            block["cache_control"] = part.cache_control
        return block
    if isinstance(part, ImagePart):
        if part.data is not None:
            return {"type": "image", "source": {"type": "base64", "media_type": part.media_type or "image/png",
                                                "data": part.data}}
        if part.url and part.url.startswith("data:"):
            media_type, _, data = part.url[5:].partition(";base64,")
            return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
        if part.url:
            return {"type": "image", "source": {"type": "url", "url": part.url}}
        if part.file_id:
            return {"type": "image", "source": {"type": "file", "file_id": part.file_id}}
        return None
    if isinstance(part, FilePart):
        if part.data is not None:
            source: dict[str, Any] = {"type": "base64", "media_type": part.media_type or "application/pdf",
                                      "data": part.data}
        elif part.url:
            source = {"type": "url", "url": part.url}
        elif part.file_id:
            source = {"type": "file", "file_id": part.file_id}
        else:
            return None
        document: dict[str, Any] = {"type": "document", "source": source}
        if part.filename:
            document["title"] = part.filename
        return document
    log.info("dropping an audio part: Anthropic upstreams take no audio")
    return None


# ------------------------------------------------------------ tools and reasoning


def _encode_tool(tool: Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name}
    description = tool.description
    if tool.kind == "custom":
        description, out["input_schema"] = custom_tool_as_function(tool)
    else:
        out["input_schema"] = tool.parameters if tool.parameters is not None else {"type": "object", "properties": {}}
        if tool.strict is not None:
            out["strict"] = tool.strict
    if description:
        out["description"] = description
    if tool.cache_control:
        out["cache_control"] = tool.cache_control
    return out


def _encode_tool_choice(choice: ToolChoice | None, parallel: bool | None) -> dict[str, Any] | None:
    if choice is None:
        out: dict[str, Any] | None = {"type": "auto"} if parallel is False else None
    elif choice.mode == "tool":
        out = {"type": "tool", "name": choice.name}
    else:
        out = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice.mode]}
    if out is not None and parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


def _thinking(reasoning: ReasoningConfig | None) -> dict[str, Any] | None:
    if reasoning is None or reasoning.enabled is False or reasoning.effort in ("none",):
        return None
    if not (reasoning.enabled or reasoning.budget_tokens or reasoning.effort):
        return None
    budget = reasoning.budget_tokens or budget_for_effort(reasoning.effort)
    return {"type": "enabled", "budget_tokens": max(MIN_THINKING_BUDGET, budget)}
