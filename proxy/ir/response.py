"""The internal answer: usage, finish reasons, errors and a complete (non-streamed) response.

Owns the vocabulary both stream events and whole responses use. Usage follows the OpenAI
convention — `input_tokens` counts every prompt token including cached ones, `output_tokens`
includes reasoning — and encoders convert (Anthropic reports uncached input separately).

Pure data: must not import Flask or requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.ir.request import OutputPart

# Finish reasons, named after what happened rather than after one protocol's spelling.
STOP = "stop"  # natural end of turn
STOP_SEQUENCE = "stop_sequence"  # a client stop sequence matched
LENGTH = "length"  # max tokens reached
TOOL_CALLS = "tool_calls"  # the turn ends in tool calls
CONTENT_FILTER = "content_filter"  # a safety system stopped the output
CONTEXT_WINDOW = "context_window"  # the context window is full
PAUSE = "pause"  # the upstream paused a long turn (Anthropic pause_turn)


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_1h_tokens: int = 0  # of cache_write_tokens, those written to Anthropic's 1-hour cache

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> int:
        """Prompt tokens neither read from nor written to a cache (Anthropic's `input_tokens`)."""
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    def merge(self, other: Usage) -> None:
        """Take every figure `other` reports. Streams report cumulative values, so a later,
        non-zero figure replaces an earlier one; zeros never erase what was already known."""
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                     "reasoning_tokens", "cache_write_1h_tokens"):
            value = getattr(other, name)
            if value:
                setattr(self, name, value)


@dataclass(slots=True)
class ErrorInfo:
    """An error as every protocol can express it. `kind` is the proxy's classification
    (proxy.errors.KIND_STATUS, docs/architecture.md §11); `status` the HTTP status it maps to."""

    kind: str
    message: str
    status: int = 500
    code: str | None = None
    param: str | None = None


@dataclass(slots=True)
class Response:
    id: str
    model: str
    created: int
    output: list[OutputPart] = field(default_factory=list)
    finish_reason: str | None = None
    stop_sequence: str | None = None
    usage: Usage | None = None
    error: ErrorInfo | None = None
    extras: dict[str, Any] = field(default_factory=dict)
