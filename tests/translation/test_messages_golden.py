"""Chat Completions upstream streams → an Anthropic Messages client (golden `chat_completions__to__messages`),
replayed at every byte split, and read back by anthropic-python's own stream accumulator, which
must see the same content, stop reason and usage as the upstream sent."""

from __future__ import annotations

import json

import pytest

from proxy.ir import response as ir
from proxy.ir.fold import fold
from proxy.ir.reasoning import is_minted
from proxy.ir.request import ReasoningPart, TextPart, ToolCallPart
from proxy.protocols.chat_completions.stream_decode import ChatStreamDecoder
from proxy.protocols.messages.stream_encode import MessagesStreamEncoder
from proxy.protocols.messages.vocabulary import STOP_REASON_FROM_FINISH
from proxy.protocols.transcode import Translation
from tests.clients import read_anthropic_stream
from tests.translation.golden import check_golden, fixture, fixture_names, normalise, run_events, run_frames, splits

NAMES = fixture_names("chat_completions")
ESTIMATE = 123  # the locally estimated input tokens announced in message_start


def translate(pieces: list[bytes]) -> bytes:
    relay = Translation(ChatStreamDecoder(expect_usage=True), MessagesStreamEncoder("client-model", ESTIMATE))
    return run_frames(pieces, relay.feed, relay.close)


@pytest.mark.parametrize("name", NAMES)
def test_golden_at_every_split(name: str) -> None:
    data = fixture("chat_completions", name)
    expected = normalise(translate([data]).decode())
    check_golden(f"chat_completions__to__messages/{name}.sse", expected)
    for pieces in splits(data):
        assert normalise(translate(pieces).decode()) == expected


@pytest.mark.parametrize("name", NAMES)
def test_anthropic_sdk_reads_back_what_the_upstream_said(name: str) -> None:
    data = fixture("chat_completions", name)
    decoder = ChatStreamDecoder(expect_usage=True)
    upstream = fold(run_events([data], decoder.feed, decoder.close))
    read = read_anthropic_stream(translate([data]))
    events = read.events
    assert events[0]["type"] == "message_start"
    start = events[0]["message"]
    assert start["content"] == [] and start["model"] == "client-model" and start["id"].startswith("msg_")
    assert start["usage"]["input_tokens"] == ESTIMATE and start["usage"]["output_tokens"] >= 1
    indices = [e["index"] for e in events if e["type"] == "content_block_start"]
    assert indices == list(range(len(indices)))
    open_index = None
    for e in events:  # strictly one block at a time
        if e["type"] == "content_block_start":
            assert open_index is None
            open_index = e["index"]
        elif e["type"] in ("content_block_delta", "content_block_stop"):
            assert e["index"] == open_index
            if e["type"] == "content_block_stop":
                open_index = None
    if upstream.error is not None:
        assert read.error is not None and read.error["type"] == "error"
        assert read.error["error"]["message"] == upstream.error.message
        assert open_index is None  # the open block was closed before the error
        return
    assert [e["type"] for e in events[-2:]] == ["message_delta", "message_stop"]
    message = read.message
    expected = []
    for part in upstream.output:
        if isinstance(part, ReasoningPart):
            expected.append(("thinking", part.text))
        elif isinstance(part, TextPart):
            expected.append(("text", part.text))
        elif isinstance(part, ToolCallPart):
            expected.append(("tool_use", part.id, part.name, json.loads(part.arguments)))
    got = []
    for block in message.content:
        if block.type == "thinking":
            assert is_minted(block.signature)
            got.append(("thinking", block.thinking))
        elif block.type == "text":
            got.append(("text", block.text))
        else:
            got.append(("tool_use", block.id, block.name, block.input))
    assert got == expected
    assert message.stop_reason == STOP_REASON_FROM_FINISH[upstream.finish_reason or ir.STOP]
    usage = upstream.usage
    assert usage is not None
    assert message.usage.output_tokens == usage.output_tokens
    assert message.usage.input_tokens == usage.input_tokens - usage.cache_read_tokens
    assert message.usage.cache_read_input_tokens == usage.cache_read_tokens
