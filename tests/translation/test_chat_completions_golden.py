"""Chat Completions upstream streams, replayed at every split point:
- through the decoder into internal events (golden `chat_completions__to__ir`), which must be well-formed;
- through the same-protocol passthrough (golden `chat_completions__to__chat_completions`), whose output the
  openai SDK's own stream accumulator must read back as the right completion;
- through the decoder and the Chat encoder, which must fold to the same response as the decoder.
"""

from __future__ import annotations

import json

import pytest

from proxy.ir.fold import check_well_formed, fold
from proxy.protocols.chat_completions.passthrough import ChatPassthroughStream
from proxy.protocols.chat_completions.stream_decode import ChatStreamDecoder
from proxy.protocols.chat_completions.stream_encode import ChatStreamEncoder
from proxy.protocols.transcode import Translation
from tests.clients import read_chat_stream
from tests.translation.golden import (
    check_decoder_golden,
    check_golden,
    fixture,
    fixture_names,
    normalise,
    run_events,
    run_frames,
    splits,
)

NAMES = fixture_names("chat_completions")
MODEL = "client-model"


def decode(pieces: list[bytes]) -> list:  # type: ignore[type-arg]
    decoder = ChatStreamDecoder(expect_usage=True)
    return run_events(pieces, decoder.feed, decoder.close)


def passthrough(pieces: list[bytes], include_usage: bool = True) -> bytes:
    relay = ChatPassthroughStream(MODEL, client_wants_usage=include_usage)
    return run_frames(pieces, relay.feed, relay.close)


@pytest.mark.parametrize("name", NAMES)
def test_decoder_golden_at_every_split(name: str) -> None:
    check_decoder_golden("chat_completions", name, decode)


@pytest.mark.parametrize("name", NAMES)
def test_passthrough_golden_at_every_split(name: str) -> None:
    data = fixture("chat_completions", name)
    expected = normalise(passthrough([data]).decode())
    check_golden(f"chat_completions__to__chat_completions/{name}.sse", expected)
    for pieces in splits(data):
        assert normalise(passthrough(pieces).decode()) == expected


@pytest.mark.parametrize("name", NAMES)
def test_passthrough_reads_back_in_the_sdk_as_the_decoder_saw_it(name: str) -> None:
    data = fixture("chat_completions", name)
    ir = fold(decode([data]))
    final = read_chat_stream(passthrough([data]))
    if ir.error is not None:
        assert final == ("error", ir.error.message) or isinstance(final, tuple)
        return
    message = final.choices[0].message
    assert final.model == MODEL
    assert message.role == "assistant"
    texts = [p.text for p in ir.output if type(p).__name__ == "TextPart"]
    assert (message.content or "") == "".join(texts)
    calls = [p for p in ir.output if type(p).__name__ == "ToolCallPart"]
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []] == \
        [(c.id, c.name, c.arguments) for c in calls]
    chat_finish = {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}[ir.finish_reason or "stop"]
    assert final.choices[0].finish_reason == chat_finish
    if ir.usage is not None:
        assert final.usage is not None and final.usage.prompt_tokens == ir.usage.input_tokens


@pytest.mark.parametrize("name", NAMES)
def test_passthrough_without_include_usage_hides_usage(name: str) -> None:
    out = passthrough([fixture("chat_completions", name)], include_usage=False)
    for frame in out.split(b"\n\n"):
        if frame.startswith(b"data: {"):
            chunk = json.loads(frame[6:])
            assert "usage" not in chunk and (chunk.get("choices") or "error" in chunk)


@pytest.mark.parametrize("name", NAMES)
def test_chat_encoder_round_trips_through_the_decoder(name: str) -> None:
    events = decode([fixture("chat_completions", name)])
    translation = Translation(ChatStreamDecoder(), ChatStreamEncoder(MODEL, include_usage=True))
    encoded = b"".join(f for ev in events for f in translation.encoder.encode(ev))
    # [DONE] ends a finished answer only: after an error the stream just ends (the real API's way).
    assert encoded.endswith(b"data: [DONE]\n\n") == (fold(events).error is None)
    again = decode([encoded])
    check_well_formed(again)
    first, second = fold(events), fold(again)
    assert second.output == first.output
    assert second.finish_reason == first.finish_reason
    assert (second.error is None) == (first.error is None)
    if first.error is None:
        assert second.usage == first.usage
        final = read_chat_stream(encoded)
        assert final.model == MODEL and final.choices[0].message.role == "assistant"
