"""Every upstream decoder gives IR usage in one convention (docs/architecture.md §3.2), the one cost
is computed from (proxy/money/cost.py): `input_tokens` is every prompt token, cache reads and writes
included; `output_tokens` includes reasoning; cache reads, writes (and of them the 1-hour writes)
set — for whole answers and for streams, per protocol."""

from __future__ import annotations

import json
from typing import Any

from proxy.ir.fold import fold
from proxy.ir.response import Usage
from proxy.protocols.chat_completions.response import decode as chat_decode
from proxy.protocols.chat_completions.stream_decode import ChatStreamDecoder
from proxy.protocols.messages.stream_decode import MessagesStreamDecoder
from proxy.protocols.messages.upstream_response import decode as messages_decode
from proxy.protocols.responses.stream_decode import ResponsesStreamDecoder
from proxy.protocols.responses.upstream_response import decode as responses_decode
from proxy.protocols.sse import SSEParser

# One prompt of 1,000 tokens: 600 read from the cache, 300 written to it (200 of them to the
# 1-hour cache), 100 neither; 250 output tokens of which 80 reasoning.
EXPECTED = Usage(input_tokens=1000, output_tokens=250, cache_read_tokens=600, cache_write_tokens=300,
                 reasoning_tokens=80, cache_write_1h_tokens=200)
ANTHROPIC = {"input_tokens": 100, "cache_read_input_tokens": 600, "cache_creation_input_tokens": 300,
             "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
             "output_tokens": 250, "output_tokens_details": {"thinking_tokens": 80}}
CHAT = {"prompt_tokens": 1000, "completion_tokens": 250, "total_tokens": 1250,
        "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300},
        "completion_tokens_details": {"reasoning_tokens": 80}}
RESPONSES = {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300},
             "output_tokens": 250, "output_tokens_details": {"reasoning_tokens": 80}, "total_tokens": 1250}


def streamed(decoder: Any, events: list[tuple[str | None, dict[str, Any] | str]]) -> Usage | None:
    parser, out = SSEParser(), []
    text = "".join((f"event: {name}\n" if name else "") + "data: "
                   + (data if isinstance(data, str) else json.dumps(data)) + "\n\n" for name, data in events)
    for sse in parser.feed(text.encode()):
        out += decoder.feed(sse)
    for sse in parser.flush():
        out += decoder.feed(sse)
    out += decoder.close()
    return fold(out).usage


def without_1h(usage: Usage) -> Usage:
    return Usage(usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens,
                 usage.reasoning_tokens, 0)


# ------------------------------------------------------------ Messages (Anthropic)


def message(usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "hi"}], "usage": usage}


def test_anthropic_whole_answer_adds_cache_reads_and_writes_to_input_and_keeps_the_1h_writes() -> None:
    assert messages_decode(message(ANTHROPIC)).usage == EXPECTED


def anthropic_stream(start_usage: dict[str, Any], delta_usage: dict[str, Any]) -> Usage | None:
    start = message(start_usage) | {"content": [], "stop_reason": None}
    return streamed(MessagesStreamDecoder(), [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "hi"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": delta_usage}),
        ("message_stop", {"type": "message_stop"})])


def test_anthropic_stream_usage_from_message_start_with_output_in_message_delta() -> None:
    start = {k: v for k, v in ANTHROPIC.items() if k not in ("output_tokens", "output_tokens_details")}
    assert anthropic_stream(start | {"output_tokens": 1},
                            {"output_tokens": 250, "output_tokens_details": {"thinking_tokens": 80}}) == EXPECTED


def test_anthropic_stream_usage_repeated_cumulatively_in_message_delta() -> None:
    """Newer API versions repeat every figure in message_delta, the 1-hour split included."""
    assert anthropic_stream({"input_tokens": 100, "output_tokens": 1}, ANTHROPIC) == EXPECTED


def test_anthropic_message_delta_with_cache_figures_but_no_input_does_not_shrink_the_input() -> None:
    delta = {k: v for k, v in ANTHROPIC.items() if k != "input_tokens"}
    assert anthropic_stream(ANTHROPIC | {"output_tokens": 1}, delta) == EXPECTED


def test_anthropic_without_cache_creation_has_no_1h_writes() -> None:
    plain = {k: v for k, v in ANTHROPIC.items() if k != "cache_creation"}
    assert messages_decode(message(plain)).usage == without_1h(EXPECTED)


# ------------------------------------------------------------ Chat Completions (OpenAI)


def test_chat_whole_answer_prompt_tokens_already_include_cached() -> None:
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "usage": CHAT,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    assert chat_decode(body).usage == without_1h(EXPECTED)


def test_chat_stream_usage_chunk() -> None:
    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": choices, **extra}

    usage = streamed(ChatStreamDecoder(expect_usage=True), [
        (None, chunk([{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}])),
        (None, chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])),
        (None, chunk([], usage=CHAT)), (None, "[DONE]")])
    assert usage == without_1h(EXPECTED)


def test_deepseek_cache_hits_at_the_top_level_count_as_cache_reads() -> None:
    raw = {"prompt_tokens": 1000, "completion_tokens": 250, "prompt_cache_hit_tokens": 600,
           "prompt_cache_miss_tokens": 400}
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "deepseek-chat", "usage": raw,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    assert chat_decode(body).usage == Usage(input_tokens=1000, output_tokens=250, cache_read_tokens=600)


# ------------------------------------------------------------ Responses (OpenAI)


def response(usage: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": status,
            "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "hi", "annotations": []}]}],
            "usage": usage}


def test_responses_whole_answer_input_tokens_include_cached() -> None:
    assert responses_decode(response(RESPONSES)).usage == without_1h(EXPECTED)


def test_responses_stream_usage_from_response_completed() -> None:
    created = response(RESPONSES) | {"status": "in_progress", "output": [], "usage": None}
    item = response(RESPONSES)["output"][0]
    usage = streamed(ResponsesStreamDecoder(), [
        ("response.created", {"type": "response.created", "sequence_number": 0, "response": created}),
        ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 1,
                                        "output_index": 0, "item": item | {"content": [], "status": "in_progress"}}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 2,
                                        "output_index": 0, "content_index": 0, "item_id": "msg_1", "delta": "hi"}),
        ("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 3,
                                       "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "sequence_number": 4, "response": response(RESPONSES)})])
    assert usage == without_1h(EXPECTED)
