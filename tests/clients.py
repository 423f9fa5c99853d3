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


@dataclass
class ResponsesRead:
    final: Any = None  # what responses.stream(...).get_final_response() returns (None without response.completed)
    events: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None  # an event with a top-level "error" (openai-python raises APIError)


def read_responses_stream(data: bytes) -> ResponsesRead:
    """openai-python's Stream + ResponseStreamState (the `responses.stream()` helper) on raw bytes."""
    from openai import omit
    from openai._streaming import SSEDecoder as OpenAISSEDecoder
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.responses import ResponseStreamEvent

    read = ResponsesRead()
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for sse in OpenAISSEDecoder().iter_bytes(iter([data])):
        if sse.data.startswith("[DONE]"):
            break
        payload = sse.json()
        assert sse.event == payload["type"], f"event: {sse.event} carries data of type {payload['type']}"
        read.events.append(payload)
        if payload.get("error"):
            read.error = payload
            continue  # openai-python raises here; keep reading to check the terminal events too
        state.handle_event(openai_construct(type_=ResponseStreamEvent, value=payload))  # type: ignore[arg-type]
    read.final = state._completed_response
    return read
