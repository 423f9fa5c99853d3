"""The golden matrix for non-Chat upstreams: every recorded Anthropic (and Responses) upstream
stream by every client protocol, replayed whole, byte by byte and cut at every offset.

- into internal events (golden `<upstream>__to__ir`), which must be well-formed;
- into each client protocol (golden `<upstream>__to__<client>`) — through the passthrough when the
  client speaks the upstream's protocol, which must give back the recorded bytes exactly when the
  stream is complete;
- and read back by each client's real SDK, which must see what the upstream said: the same text,
  reasoning, tool calls, finish and output tokens, or the upstream's error in-band.
(Chat Completions upstreams have their own golden tests, `chat_completions__to__*`.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from proxy.ir import response as ir
from proxy.ir.custom_calls import function_arguments
from proxy.ir.events import Event
from proxy.ir.fold import check_well_formed, fold
from proxy.ir.request import ReasoningPart, TextPart, ToolCallPart
from proxy.protocols.chat_completions.stream_encode import ChatStreamEncoder
from proxy.protocols.messages.passthrough import MessagesPassthroughStream
from proxy.protocols.messages.stream_decode import MessagesStreamDecoder
from proxy.protocols.messages.stream_encode import MessagesStreamEncoder
from proxy.protocols.messages.vocabulary import STOP_REASON_FROM_FINISH
from proxy.protocols.responses.passthrough import ResponsesPassthroughStream
from proxy.protocols.responses.stream_decode import ResponsesStreamDecoder
from proxy.protocols.responses.stream_encode import ResponsesStreamEncoder
from proxy.protocols.transcode import StreamRelay, Translation
from tests.clients import read_anthropic_stream, read_chat_stream, read_responses_stream
from tests.translation.golden import (
    check_golden,
    events_json,
    fixture,
    fixture_names,
    normalise,
    run_events,
    run_frames,
    splits,
)

MODEL = "client-model"
RESPONSES_BODY = {"model": MODEL, "input": "hi", "stream": True, "store": False,
                  "include": ["reasoning.encrypted_content"]}
# upstream fixture folder → (golden prefix, decoder factory, passthrough relay factory)
UPSTREAMS: dict[str, tuple[str, Callable[[], Any], Callable[[], StreamRelay]]] = {
    "messages": ("messages", MessagesStreamDecoder, MessagesPassthroughStream),
    "responses": ("responses", ResponsesStreamDecoder, ResponsesPassthroughStream),
}
CLIENTS = ("chat_completions", "messages", "responses")
CASES = [(up, name) for up in UPSTREAMS for name in fixture_names(up)]


def decode(upstream: str, pieces: list[bytes]) -> list[Event]:
    decoder = UPSTREAMS[upstream][1]()
    return run_events(pieces, decoder.feed, decoder.close)


def relay_for(upstream: str, client: str) -> StreamRelay:
    if client == upstream:
        return UPSTREAMS[upstream][2]()
    encoders: dict[str, Callable[[], Any]] = {
        "chat_completions": lambda: ChatStreamEncoder(MODEL, True),
        "messages": lambda: MessagesStreamEncoder(MODEL, 0),
        "responses": lambda: ResponsesStreamEncoder(RESPONSES_BODY, MODEL, custom_tools=set(), include_encrypted=True),
    }
    return Translation(UPSTREAMS[upstream][1](), encoders[client]())


def translate(upstream: str, client: str, pieces: list[bytes]) -> bytes:
    relay = relay_for(upstream, client)
    return run_frames(pieces, relay.feed, relay.close)


@pytest.mark.parametrize(("upstream", "name"), CASES)
def test_decoder_golden_at_every_split(upstream: str, name: str) -> None:
    data = fixture(upstream, name)
    whole = decode(upstream, [data])
    check_well_formed(whole)
    expected = normalise(events_json(whole))
    check_golden(f"{UPSTREAMS[upstream][0]}__to__ir/{name}.jsonl", expected)
    for pieces in splits(data):
        assert normalise(events_json(decode(upstream, pieces))) == expected


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("upstream", "name"), CASES)
def test_client_golden_at_every_split(upstream: str, name: str, client: str) -> None:
    data = fixture(upstream, name)
    expected = normalise(translate(upstream, client, [data]).decode())
    check_golden(f"{UPSTREAMS[upstream][0]}__to__{client}/{name}.sse", expected)
    for pieces in splits(data):
        assert normalise(translate(upstream, client, pieces).decode()) == expected


@pytest.mark.parametrize(("upstream", "name"), CASES)
def test_passthrough_gives_back_the_recorded_bytes(upstream: str, name: str) -> None:
    data = fixture(upstream, name)
    out = translate(upstream, upstream, [data])
    said = fold(decode(upstream, [data]))
    if said.error is None or said.error.kind != "upstream_error":
        assert out == data  # complete streams, and the upstream's own error events, are relayed as they were
    else:
        # The upstream broke off, or sent an event that breaks its protocol (a delta for a block it
        # never opened): what came before is relayed as it was, then the proxy's error event ends it.
        cut = out.rindex(b"event: error\n")
        assert data.startswith(out[:cut])
        assert cut == len(data) or said.error.message.startswith("upstream sent")


# ------------------------------------------------------------ what each SDK reads back


def expected_answer(upstream: str, name: str, client: str | None = None) -> ir.Response:
    """The answer the upstream gave, as the IR folds it — as a passthrough relays it when the client
    speaks the upstream's protocol (no block turned into another, the JSON tool's call included)."""
    if client == upstream:
        decoder = UPSTREAMS[upstream][1](relayed=True)
        return fold(run_events([fixture(upstream, name)], decoder.feed, decoder.close))
    return fold(decode(upstream, [fixture(upstream, name)]))


def texts(resp: ir.Response) -> str:
    return "".join(p.text for p in resp.output if isinstance(p, TextPart))


def calls(resp: ir.Response) -> list[tuple[str, Any]]:
    """Tool calls as a client without freeform tools sees them: custom ones take {"input": …}."""
    return [(p.name, json.loads(function_arguments(p) or "{}")) for p in resp.output if isinstance(p, ToolCallPart)]


def thinking(resp: ir.Response) -> list[str]:
    return [p.text for p in resp.output if isinstance(p, ReasoningPart) and p.redacted is None]


@pytest.mark.parametrize(("upstream", "name"), CASES)
def test_openai_chat_sdk_reads_back_what_the_upstream_said(upstream: str, name: str) -> None:
    said = expected_answer(upstream, name)
    got = read_chat_stream(translate(upstream, "chat_completions", [fixture(upstream, name)]))
    if said.error is not None:
        assert got == ("error", said.error.message)
        return
    message = got.choices[0].message
    assert (message.content or "") == texts(said)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []] == calls(said)
    finish = {ir.STOP: "stop", ir.STOP_SEQUENCE: "stop", ir.LENGTH: "length", ir.TOOL_CALLS: "tool_calls"}
    assert got.choices[0].finish_reason == finish[said.finish_reason or ir.STOP]
    assert said.usage is not None and got.usage.completion_tokens == said.usage.output_tokens


@pytest.mark.parametrize(("upstream", "name"), CASES)
def test_anthropic_sdk_reads_back_what_the_upstream_said(upstream: str, name: str) -> None:
    said = expected_answer(upstream, name, "messages")
    read = read_anthropic_stream(translate(upstream, "messages", [fixture(upstream, name)]))
    if said.error is not None:
        assert read.error is not None and read.error["error"]["message"] == said.error.message
        return
    message = read.message
    assert "".join(b.text for b in message.content if b.type == "text") == texts(said)
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == calls(said)
    assert [b.thinking for b in message.content if b.type == "thinking"] == thinking(said)
    signatures = [p.signature for p in said.output if isinstance(p, ReasoningPart) and p.redacted is None]
    if upstream == "messages":  # Anthropic's own signatures arrive untouched
        assert [b.signature for b in message.content if b.type == "thinking"] == signatures
    assert message.stop_reason == STOP_REASON_FROM_FINISH[said.finish_reason or ir.STOP]
    assert said.usage is not None and message.usage.output_tokens == said.usage.output_tokens


@pytest.mark.parametrize(("upstream", "name"), CASES)
def test_openai_responses_sdk_reads_back_what_the_upstream_said(upstream: str, name: str) -> None:
    said = expected_answer(upstream, name, "responses")
    read = read_responses_stream(translate(upstream, "responses", [fixture(upstream, name)]))
    if said.error is not None:
        assert read.error is not None and read.error["error"]["message"] == said.error.message
        assert read.events[-1]["type"] == "response.failed"
        return
    if said.finish_reason == ir.LENGTH:  # response.incomplete: get_final_response() raises, as against the real API
        assert read.final is None
        assert read.events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
        return
    final = read.final
    assert final is not None and final.output_text == texts(said)
    assert [(o.name, json.loads(o.arguments)) for o in final.output if o.type == "function_call"] == \
        [(p.name, json.loads(p.arguments or "{}")) for p in said.output if isinstance(p, ToolCallPart) and p.kind != "custom"]
    assert [(o.name, o.input) for o in final.output if o.type == "custom_tool_call"] == \
        [(p.name, p.arguments) for p in said.output if isinstance(p, ToolCallPart) and p.kind == "custom"]
    reasoning = [o for o in final.output if o.type == "reasoning"]
    assert ["\n\n".join(s.text for s in o.summary) for o in reasoning if o.summary] == [t for t in thinking(said) if t]
    assert all(o.encrypted_content for o in reasoning)  # what lets the client send the reasoning back
    assert final.status == "completed"
    assert said.usage is not None and final.usage is not None and final.usage.output_tokens == said.usage.output_tokens
