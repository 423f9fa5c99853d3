"""The Chat Completions protocol's shared vocabulary: finish reasons and usage, both ways — read
from what OpenAI-compatible upstreams send (the stream decoder, the whole-body decoder and the
passthrough all read them here) and written for Chat clients (the stream encoder and the body).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir import response as ir
from proxy.ir.response import Usage
from proxy.protocols.fields import count, obj

FINISH_FROM_CHAT = {
    "stop": ir.STOP,
    "length": ir.LENGTH,
    "tool_calls": ir.TOOL_CALLS,
    "function_call": ir.TOOL_CALLS,
    "content_filter": ir.CONTENT_FILTER,
    # spellings seen from OpenAI-compatible servers that are not OpenAI
    "max_tokens": ir.LENGTH,
    "model_length": ir.LENGTH,
    "end_turn": ir.STOP,
    "eos": ir.STOP,
    "stop_sequence": ir.STOP_SEQUENCE,
    "tool_use": ir.TOOL_CALLS,
}
FINISH_TO_CHAT = {
    ir.STOP: "stop",
    ir.STOP_SEQUENCE: "stop",
    ir.LENGTH: "length",
    ir.CONTEXT_WINDOW: "length",
    ir.TOOL_CALLS: "tool_calls",
    ir.CONTENT_FILTER: "content_filter",
    ir.PAUSE: "stop",
}


def stopped_after_calls(reason: Any, saw_tool_calls: bool) -> bool:
    """Whether a finish reason that says the answer stopped means tool_calls: some compatible
    servers say "stop" (or their own word for it, "eos", "end_turn") after tool calls, and clients
    run tools only on tool_calls. The decoders, the passthrough and the passthrough's body
    normalisation all ask this, so every client gets the same answer."""
    return saw_tool_calls and FINISH_FROM_CHAT.get(str(reason), ir.STOP) == ir.STOP


def finish_from_chat(reason: Any, saw_tool_calls: bool) -> str:
    if stopped_after_calls(reason, saw_tool_calls):
        return ir.TOOL_CALLS
    return FINISH_FROM_CHAT.get(str(reason), ir.STOP)


def matched_stop(choice: dict[str, Any]) -> str | None:
    """The stop sequence that ended the choice, where the server says (vLLM and SGLang put the
    matched string in a non-standard `stop_reason`; OpenAI itself never says which one matched)."""
    matched = choice.get("stop_reason")
    return matched if isinstance(matched, str) and matched and choice.get("finish_reason") == "stop" else None


def usage_from_chat(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    prompt, completion = obj(raw, "prompt_tokens_details"), obj(raw, "completion_tokens_details")
    return Usage(
        input_tokens=count(raw.get("prompt_tokens")),
        output_tokens=count(raw.get("completion_tokens")),
        # DeepSeek reports cache hits at the top level instead of in prompt_tokens_details.
        cache_read_tokens=count(prompt.get("cached_tokens")) or count(raw.get("prompt_cache_hit_tokens")),
        cache_write_tokens=count(prompt.get("cache_write_tokens")),
        reasoning_tokens=count(completion.get("reasoning_tokens")),
    )


def usage_to_chat(usage: Usage) -> dict[str, Any]:
    prompt_details: dict[str, int] = {"cached_tokens": usage.cache_read_tokens}
    if usage.cache_write_tokens:
        prompt_details["cache_write_tokens"] = usage.cache_write_tokens
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }
