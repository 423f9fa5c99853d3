"""The Anthropic Messages protocol's shared vocabulary: stop reasons and usage, both ways — read
from what Anthropic upstreams send (the stream decoder and the whole-Message decoder) and written
for Messages clients (the stream encoder and the body) — and an upstream's error object read into
the proxy's error kinds.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import KIND_FOR_ERROR_TYPE, KIND_STATUS
from proxy.ir import response as ir
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.fields import count, obj, text

FINISH_FROM_STOP_REASON = {
    "end_turn": ir.STOP, "max_tokens": ir.LENGTH, "stop_sequence": ir.STOP_SEQUENCE, "tool_use": ir.TOOL_CALLS,
    "pause_turn": ir.PAUSE, "refusal": ir.CONTENT_FILTER, "model_context_window_exceeded": ir.CONTEXT_WINDOW,
}
STOP_REASON_FROM_FINISH = {
    ir.STOP: "end_turn",
    ir.STOP_SEQUENCE: "stop_sequence",
    ir.LENGTH: "max_tokens",
    ir.TOOL_CALLS: "tool_use",
    ir.CONTENT_FILTER: "refusal",
    ir.CONTEXT_WINDOW: "model_context_window_exceeded",
    ir.PAUSE: "pause_turn",
}


def usage_from_anthropic(raw: Any) -> Usage | None:
    """Anthropic usage → IR usage (whose input counts cached tokens too, the OpenAI convention)."""
    if not isinstance(raw, dict):
        return None
    cache_read, cache_write = count(raw.get("cache_read_input_tokens")), count(raw.get("cache_creation_input_tokens"))
    # Of the cache writes, those to the 1-hour cache (billed higher): `cache_creation` splits them by TTL.
    write_1h = count(obj(raw, "cache_creation").get("ephemeral_1h_input_tokens"))
    # A message_delta that leaves input out (older API versions send only output_tokens there) must
    # not make the cache figures look like the whole prompt: no input_tokens, no input figure (0
    # erases nothing when stream usage is merged).
    uncached = raw.get("input_tokens")
    return Usage(input_tokens=count(uncached) + cache_read + cache_write if uncached is not None else 0,
                 output_tokens=count(raw.get("output_tokens")),
                 cache_read_tokens=cache_read, cache_write_tokens=cache_write,
                 reasoning_tokens=count(obj(raw, "output_tokens_details").get("thinking_tokens")),
                 cache_write_1h_tokens=min(write_1h, cache_write) if cache_write else write_1h)


def usage_to_anthropic(usage: Usage) -> dict[str, Any]:
    """IR usage → Anthropic's, whose `input_tokens` leaves out the cache reads and writes it reports
    separately."""
    return {
        "input_tokens": usage.uncached_input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
    }


def error_from_anthropic(error: Any, default_message: str = "upstream error") -> ErrorInfo:
    """The `error` object of an Anthropic error body or `event: error`."""
    kind = KIND_FOR_ERROR_TYPE.get(text(error, "type"), "api_error")
    return ErrorInfo(kind=kind, message=text(error, "message") or default_message, status=KIND_STATUS.get(kind, 500))
