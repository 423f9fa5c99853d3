"""Client-side readers for stream bytes, built from the real SDKs' own parsing code.

Golden tests use these to check that what the proxy emits reads back, in each SDK, as the answer
the upstream gave. Each follows its SDK's dispatch rules exactly (which events are skipped, which
raise) and then hands the events to that SDK's accumulator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from anthropic._models import construct_type as anthropic_construct
from anthropic._streaming import SSEDecoder as AnthropicSSEDecoder
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from openai._models import construct_type as openai_construct
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk


@dataclass
class AnthropicRead:
    message: Any = None  # the SDK's accumulated snapshot (what get_final_message() returns)
    events: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None  # the body of an `event: error` (the SDK raises APIStatusError)


def read_anthropic_stream(data: bytes) -> AnthropicRead:
    """anthropic-python's Stream.__stream__ + MessageStream accumulation, on raw bytes."""
    read = AnthropicRead()
    json_bufs: dict[int, bytes] = {}
    for sse in AnthropicSSEDecoder().iter_bytes(iter([data])):
        if sse.event == "ping" or sse.event is None:
            continue
        if sse.event == "error":
            read.error = sse.json()
            return read
        if not sse.data:
            continue
        payload = sse.json()
        assert payload["type"] == sse.event, f"event: {sse.event} carries data of type {payload['type']}"
        read.events.append(payload)
        event = anthropic_construct(type_=RawMessageStreamEvent, value=payload)
        read.message = accumulate_event(event=event, current_snapshot=read.message, json_bufs=json_bufs)  # type: ignore[arg-type]
    return read


def read_chat_stream(data: bytes) -> Any:
    """openai-python's stream helper state on raw Chat SSE bytes: the completion snapshot, or
    ("error", message) when an error chunk arrives (the SDK raises APIError)."""
    state = ChatCompletionStreamState()
    for frame in data.split(b"\n\n"):
        if not frame.startswith(b"data: ") or frame == b"data: [DONE]":
            continue
        payload = json.loads(frame[6:])
        if payload.get("error"):
            return ("error", payload["error"]["message"])
        state.handle_chunk(openai_construct(type_=ChatCompletionChunk, value=payload))
    # The snapshot, not get_final_completion(): the helper raises LengthFinishReasonError by design.
    return state.current_completion_snapshot
