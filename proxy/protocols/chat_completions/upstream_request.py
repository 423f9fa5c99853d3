"""Chat Completions requests for OpenAI-compatible upstreams, built from the IR.

Owns the upstream side of the Chat request (docs/protocols.md §3.1): messages in Chat's shape (tool
results as `role: tool` messages, images from tool results as a following user turn, reasoning
passed back only where the upstream needs it), tools (custom tools as one-string-argument
functions), tool choice, and the dialect options each upstream is configured with — how reasoning
is asked for, which max-tokens field it takes and its cap, whether streams report usage.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import logging
from typing import Any

from proxy.config import Upstream
from proxy.ir.custom_calls import custom_tool_as_function, function_arguments
from proxy.ir.reasoning import from_plain_upstream
from proxy.ir.request import (
    AudioPart,
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    RefusalPart,
    Request,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    effort_for_budget,
)
from proxy.ir.request import Reasoning as ReasoningConfig

log = logging.getLogger(__name__)


def encode(req: Request, model: str, upstream: Upstream) -> dict[str, Any]:
    """Build the Chat body for an OpenAI-compatible upstream from the IR.

    The upstream's options decide what its dialect needs: when earlier reasoning goes back as
    `reasoning_content` (DeepSeek-style backends reject a tool-call history without it), how a
    request for reasoning is spelled, which max-tokens field it takes and its output cap, and
    whether streams ask for usage (so the pool can count tokens).
    """
    passback = upstream.reasoning.passback
    body: dict[str, Any] = {"model": model, "messages": []}
    for msg in req.messages:
        body["messages"].extend(_encode_message(msg, passback))
    if req.tools:
        body["tools"] = [_encode_tool(t) for t in req.tools]
        if req.tool_choice is not None:
            body["tool_choice"] = _encode_tool_choice(req.tool_choice, req.tools)
    elif req.tool_choice is not None and req.tool_choice.mode != "none":
        # No function tool is left (only hosted tools were given, which a Chat upstream cannot run):
        # OpenAI-compatible servers answer 400 to a tool_choice without tools, so it goes with them.
        log.info("chat upstream: dropping tool_choice %r: no function tool is left to choose from",
                 req.tool_choice.name or req.tool_choice.mode)
    if req.parallel_tool_calls is not None and req.tools:
        body["parallel_tool_calls"] = req.parallel_tool_calls
    if req.max_tokens is not None:
        cap = upstream.max_output_tokens
        body[upstream.max_tokens_field] = min(req.max_tokens, cap) if cap else req.max_tokens
    optional = {
        "temperature": req.temperature, "top_p": req.top_p, "seed": req.seed,
        "presence_penalty": req.presence_penalty, "frequency_penalty": req.frequency_penalty, "user": req.user,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    if req.stop:
        body["stop"] = req.stop
    body.update(reasoning_fields(req.reasoning, upstream.reasoning.control))
    if req.response_format is not None:
        body["response_format"] = _encode_response_format(req.response_format)
    if req.stream:
        body["stream"] = True
        if upstream.stream_usage or req.include_usage:
            body["stream_options"] = {"include_usage": True}
    return body


def reasoning_fields(reasoning: ReasoningConfig | None, control: str) -> dict[str, Any]:
    """A client's request for reasoning in the dialect the upstream understands (config `reasoning.control`)."""
    if reasoning is None or control == "none":
        return {}
    wanted = reasoning.enabled is not False and (
        bool(reasoning.enabled) or reasoning.budget_tokens is not None or reasoning.effort not in (None, "none"))
    effort = reasoning.effort or effort_for_budget(reasoning.budget_tokens)
    if control == "reasoning_effort":
        return {"reasoning_effort": effort if wanted else "none"} if wanted or reasoning.effort else {}
    if control == "deepseek":
        return {"thinking": {"type": "enabled" if wanted else "disabled"}}
    if control == "qwen":
        fields: dict[str, Any] = {"enable_thinking": wanted}
        if wanted and reasoning.budget_tokens:
            fields["thinking_budget"] = reasoning.budget_tokens
        return fields
    # openrouter
    if not wanted:
        return {"reasoning": {"enabled": False}}
    if reasoning.budget_tokens and not reasoning.effort:
        return {"reasoning": {"max_tokens": reasoning.budget_tokens}}
    return {"reasoning": {"effort": effort}}


def _encode_message(msg: Message, reasoning_passback: str) -> list[dict[str, Any]]:
    if msg.role == "tool":
        out: list[dict[str, Any]] = []
        images: list[ContentPart] = []
        for part in msg.parts:
            if isinstance(part, ToolResultPart):
                # Chat has no error flag for tool results; the text is sent as the client wrote it.
                out.append({"role": "tool", "tool_call_id": part.call_id, "content": part.text()})
                images.extend(p for p in part.content if isinstance(p, ImagePart))
        if images:  # a Chat tool message carries text only; images follow as a user turn
            out.append({"role": "user", "content": [_encode_part(p) for p in images]})
        return out
    if msg.role == "assistant":
        chat: dict[str, Any] = {"role": "assistant"}
        text = "".join(p.text for p in msg.parts if isinstance(p, TextPart))
        refusal = "".join(p.text for p in msg.parts if isinstance(p, RefusalPart))
        calls = [p for p in msg.parts if isinstance(p, ToolCallPart)]
        chat["content"] = text or (None if calls else "")
        if refusal:
            chat["refusal"] = refusal
        if calls:  # arguments never empty: an empty string is not the JSON object Chat servers parse
            chat["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": function_arguments(c) or "{}"}}
                for c in calls
            ]
        thinking = passback([p for p in msg.parts if isinstance(p, ReasoningPart)], bool(calls), reasoning_passback)
        if thinking is not None:
            chat["reasoning_content"] = thinking
        return [chat]
    parts = [p for p in msg.parts if isinstance(p, TextPart | ImagePart | FilePart | AudioPart)]
    # OpenAI treats developer like system; many compatible servers reject the developer role.
    message: dict[str, Any] = {"role": "system" if msg.role == "developer" else msg.role}
    if all(isinstance(p, TextPart) for p in parts) and (msg.role != "user" or len(parts) <= 1):
        # System prompts arrive as several blocks (Anthropic); a newline keeps their boundaries.
        message["content"] = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    else:
        message["content"] = [_encode_part(p) for p in parts]
    if msg.name:
        message["name"] = msg.name
    return [message]


def passback(reasoning: list[ReasoningPart], has_calls: bool, mode: str) -> str | None:
    """The `reasoning_content` of one assistant message, or None to send none (config
    `reasoning.passback`). DeepSeek's thinking mode answers 400 for an assistant message that carries
    tool calls without its reasoning, in every later request, while it ignores reasoning elsewhere;
    other compatible servers may refuse the field. So "auto" sends it on tool-call messages only,
    and only reasoning that such an upstream produced (never Anthropic's or OpenAI's own thinking,
    which no Chat server made); "always" sends every message's readable reasoning, and an empty one
    on a tool-call message that has none, for a backend that insists whatever made the history."""
    if mode == "never":
        return None
    if mode == "always":
        text = "".join(p.text for p in reasoning)
        return text if text or has_calls else None
    plain = [p.text for p in reasoning if from_plain_upstream(p)]
    return "".join(plain) if has_calls and plain else None


def _encode_part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        image: dict[str, Any] = {"url": part.as_url() or ""}
        if part.detail:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(part, AudioPart):
        return {"type": "input_audio", "input_audio": {"data": part.data, "format": part.format}}
    file: dict[str, Any] = {}
    if part.data is not None:
        file["file_data"] = f"data:{part.media_type or 'application/octet-stream'};base64,{part.data}"
    if part.file_id:
        file["file_id"] = part.file_id
    if part.filename:
        file["filename"] = part.filename
    return {"type": "file", "file": file}


def _encode_tool(tool: Tool) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": tool.name}
    if tool.description:
        fn["description"] = tool.description
    if tool.kind == "custom":
        description, fn["parameters"] = custom_tool_as_function(tool)
        if description:
            fn["description"] = description
    else:
        fn["parameters"] = tool.parameters if tool.parameters is not None else {"type": "object", "properties": {}}
        if tool.strict is not None:
            fn["strict"] = tool.strict
    return {"type": "function", "function": fn}


def _encode_tool_choice(choice: ToolChoice, tools: list[Tool]) -> Any:
    if choice.mode == "tool":
        return {"type": "function", "function": {"name": choice.name}}
    if choice.allowed is not None:
        named = [{"type": "function", "function": {"name": n}} for n in choice.allowed]
        return {"type": "allowed_tools", "allowed_tools": {"mode": choice.mode, "tools": named}}
    return choice.mode


def _encode_response_format(fmt: ResponseFormat) -> dict[str, Any]:
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    schema: dict[str, Any] = {"name": fmt.name or "response", "schema": fmt.schema or {}}
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    if fmt.description:
        schema["description"] = fmt.description
    return {"type": "json_schema", "json_schema": schema}
