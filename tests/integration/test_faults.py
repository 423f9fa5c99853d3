"""Upstream fault injection, for all three client protocols, streaming and not: every fault gets a
protocol-shaped answer — before the first byte an HTTP error with the right status, after it the
protocol's in-band error and a proper terminator — and nothing hangs past the configured deadlines.

The upstream misbehaves on cue: real sockets that refuse, never accept, or never answer, and the
simulated upstream replaying exact scripted bytes (`/_demo/script`).
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients import read_anthropic_stream, read_chat_stream, read_responses_stream
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, listening_socket, start_proxy, stop_proxy
from tests.wire import request

PROTOCOLS = ("chat_completions", "messages", "responses")
CONNECT, READ, IDLE = 0.5, 1.0, 1.0


@pytest.fixture(scope="module")
def fault_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    queued = socket.create_connection(full.getsockname())  # fills the accept queue: more connects hang
    silent = listening_socket()  # connections complete in the kernel; nobody ever answers

    def upstream(name: str, url: str, prefix: str) -> dict[str, Any]:
        return {"name": name, "protocol": "chat_completions", "base_url": url, "models": {"serve": [f"{prefix}-*"]},
                "accounts": [{"id": f"{name}-1", "api_key": f"sk-fault-{name}"}],
                "pool": {"probe": {"interval": 3600}}}

    config = {
        "client_keys": [CLIENT_KEY], "timeouts": {"connect": CONNECT, "read": READ},
        "streaming": {"keepalive_interval": 0.2, "idle_timeout": IDLE}, "max_response_bytes": "1MiB",
        "upstreams": [
            upstream("refusing", f"http://127.0.0.1:{refused.getsockname()[1]}/v1", "refused"),
            upstream("unaccepting", f"http://127.0.0.1:{full.getsockname()[1]}/v1", "conn-timeout"),
            upstream("silent", f"http://127.0.0.1:{silent.getsockname()[1]}/v1", "silent"),
            upstream("scripted", demo_upstream.url, "scripted"),
        ],
    }
    server = start_proxy(config, Path(tmp_path_factory.mktemp("faults")))
    yield server
    stop_proxy(server)
    for sock in (refused, full, queued, silent):
        sock.close()


# ---------------------------------------------------------------- helpers


def body_for(protocol: str, model: str, stream: bool, tools: bool = False) -> tuple[str, dict[str, Any]]:
    if protocol == "chat_completions":
        body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
        if tools:
            body["tools"] = [{"type": "function", "function": {"name": "save", "parameters": {"type": "object"}}}]
        path = "/v1/chat/completions"
    elif protocol == "messages":
        body = {"max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
        if tools:
            body["tools"] = [{"name": "save", "input_schema": {"type": "object"}}]
        path = "/v1/messages"
    else:
        body = {"input": "hi", "store": False}
        if tools:
            body["tools"] = [{"type": "function", "name": "save", "parameters": {"type": "object"}, "strict": False}]
        path = "/v1/responses"
    return path, {**body, "model": model, "stream": stream}


def send(proxy: ProxyServer, protocol: str, model: str, stream: bool, rid: str,
         tools: bool = False) -> tuple[int, bytes, float]:
    path, body = body_for(protocol, model, stream, tools)
    started = time.monotonic()
    resp = request(proxy.url, "POST", path, body, {"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": rid},
                   timeout=30)
    raw = resp.body()
    resp.close()
    return resp.status, raw, time.monotonic() - started


def script(demo: DemoUpstream, rid: str, *answers: dict[str, Any]) -> None:
    demo.control(f"/_demo/script?request_id={rid}", body=list(answers))


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return "data: " + json.dumps({"id": "chatcmpl-f", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                  "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]},
                                 ensure_ascii=False) + "\n\n"


START = chunk({"role": "assistant", "content": ""})
HELLO = chunk({"content": "Hello"})
END = chunk({}, "stop") + "data: [DONE]\n\n"


def error_message(protocol: str, raw: bytes) -> str:
    return str(json.loads(raw)["error"]["message"])


def assert_protocol_error(protocol: str, raw: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(raw)
    if protocol == "messages":
        assert doc["type"] == "error" and set(doc["error"]) == {"type", "message"}
    else:
        assert set(doc["error"]) == {"message", "type", "param", "code"}
    assert "Traceback" not in raw.decode(errors="replace") and b"<html" not in raw.lower()
    return doc


def in_band_error(protocol: str, raw: bytes) -> str:
    """The error a stream ended with, checked to end the way the protocol's clients need."""
    if protocol == "chat_completions":
        frames = [f for f in raw.split(b"\n\n") if f]
        assert b"data: [DONE]" not in frames  # a cut answer must not look complete
        return str(json.loads(frames[-1][6:])["error"]["message"])
    if protocol == "messages":
        read = read_anthropic_stream(raw)
        assert read.error is not None
        return str(read.error["error"]["message"])
    read = read_responses_stream(raw)
    assert read.error is not None and read.events[-1]["type"] == "response.failed"
    added = sum(e["type"] == "response.output_item.added" for e in read.events)
    assert added == sum(e["type"] == "response.output_item.done" for e in read.events)
    return str(read.error["error"]["message"])


def completed(protocol: str, raw: bytes) -> Any:
    """The answer as the protocol's SDK reads a stream that ended well."""
    if protocol == "chat_completions":
        assert raw.endswith(b"data: [DONE]\n\n")
        return read_chat_stream(raw)
    if protocol == "messages":
        read = read_anthropic_stream(raw)
        assert read.error is None and read.events[-1]["type"] == "message_stop"
        return read.message
    read = read_responses_stream(raw)
    assert read.error is None and read.final is not None
    return read.final


def text_of(protocol: str, answer: Any) -> str:
    if protocol == "chat_completions":
        return str(answer.choices[0].message.content or "")
    if protocol == "messages":
        return "".join(b.text for b in answer.content if b.type == "text")
    return str(answer.output_text)


# ---------------------------------------------------------------- before the first byte


NETWORK = {
    "refused": (502, "upstream 'refusing' refused the connection", CONNECT + 2),
    "conn-timeout": (504, f"upstream 'unaccepting' did not accept a connection within {CONNECT:g}s", CONNECT + 3),
    "silent": (504, f"upstream 'silent' sent no response within {READ:g}s", READ + 3),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("fault", list(NETWORK))
def test_unreachable_or_silent_upstream(fault_proxy: ProxyServer, fault: str, protocol: str, stream: bool) -> None:
    status, message, deadline = NETWORK[fault]
    got, raw, elapsed = send(fault_proxy, protocol, f"{fault}-x", stream, uuid.uuid4().hex)
    assert got == status and error_message(protocol, raw) == message
    assert_protocol_error(protocol, raw)
    assert elapsed < deadline


BAD_ANSWERS: dict[str, tuple[dict[str, Any], int, str]] = {
    "html_500": ({"status": 500, "body": "<html><body><h1>500 Internal Server Error</h1> nginx</body></html>"},
                 500, "upstream returned HTTP 500 with a non-JSON body: 500 Internal Server Error nginx"),
    "empty_503": ({"status": 503, "body": ""}, 503, "upstream returned HTTP 503 with an empty body"),
    "text_502": ({"status": 502, "body": "Bad Gateway"}, 502, "upstream returned HTTP 502 with a non-JSON body: Bad Gateway"),
    "closed_before_headers": ({"close": True}, 502, "upstream 'scripted' closed the connection before answering"),
    "error_inside_200": ({"status": 200, "headers": {"Content-Type": "application/json"},
                          "body": {"error": {"message": "model is loading", "type": "server_error"}}},
                         500, "model is loading"),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("fault", list(BAD_ANSWERS))
def test_bad_upstream_answers_before_the_first_byte(fault_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                    fault: str, protocol: str, stream: bool) -> None:
    answer, status, message = BAD_ANSWERS[fault]
    rid = uuid.uuid4().hex
    script(demo_upstream, rid, answer)
    got, raw, _ = send(fault_proxy, protocol, "scripted-x", stream, rid)
    assert got == status, raw
    assert_protocol_error(protocol, raw)
    assert error_message(protocol, raw) == message


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_stream_whose_first_event_is_an_error_gets_an_http_error(
        fault_proxy: ProxyServer, demo_upstream: DemoUpstream, protocol: str) -> None:
    rid = uuid.uuid4().hex
    error = 'data: {"error": {"message": "the model is overloaded", "type": "server_error", "code": 503}}\n\n'
    script(demo_upstream, rid, {"steps": [{"send": error}]})
    got, raw, _ = send(fault_proxy, protocol, "scripted-x", True, rid)
    assert got == 503  # nothing had reached the client, so the status can still say it
    assert error_message(protocol, raw) == "the model is overloaded"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_stream_with_nothing_before_its_done_is_an_error(
        fault_proxy: ProxyServer, demo_upstream: DemoUpstream, protocol: str) -> None:
    # No answer at all is a failure for every client, the passed-through Chat one included — not an
    # empty 200 for one protocol and a 502 for the others.
    rid = uuid.uuid4().hex
    script(demo_upstream, rid, {"steps": [{"send": "data: [DONE]\n\n"}]})
    got, raw, _ = send(fault_proxy, protocol, "scripted-x", True, rid)
    assert got == 502, raw
    assert_protocol_error(protocol, raw)
    assert error_message(protocol, raw) == "upstream ended the stream without sending any event"


# ---------------------------------------------------------------- after the first byte


MID_STREAM: dict[str, tuple[list[dict[str, Any]], str]] = {
    "error_chunk": ([{"send": 'data: {"error": {"message": "boom", "type": "server_error"}}\n\n'}], "boom"),
    "malformed_json": ([{"send": "data: {\"choices\": [{\"delta\": \n\n"}],
                       "upstream sent a malformed JSON chunk in its stream"),
    # The same words whether the Chat client's stream is passed through or another client's translated.
    "chunk_not_an_object": ([{"send": "data: [1, 2]\n\n"}], "upstream sent a stream chunk that is not a JSON object"),
    "closed_mid_stream": ([{"close": True}], "upstream closed the stream before it finished"),
    "broken_chunked_framing": ([{"close": True}], "the upstream connection broke before the stream finished"),
    "silent_past_idle": ([{"hold": True}], f"upstream sent nothing for {IDLE:g}s"),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("fault", list(MID_STREAM))
def test_failures_after_the_first_byte_end_in_band(fault_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                   fault: str, protocol: str) -> None:
    steps, message = MID_STREAM[fault]
    rid = uuid.uuid4().hex
    # The upstream waits after its first events until the client has received them: the failure
    # then certainly comes after the first byte reached the client.
    chunked = fault != "closed_mid_stream"  # a close-delimited stream ends at EOF; a chunked one breaks
    script(demo_upstream, rid, {"chunked": chunked, "steps": [{"send": START + HELLO}, {"wait": True}, *steps]})
    path, body = body_for(protocol, "scripted-x", True)
    started = time.monotonic()
    resp = request(fault_proxy.url, "POST", path, body, {"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": rid})
    assert resp.status == 200 and resp.next_chunk() is not None
    demo_upstream.control(f"/_demo/release?request_id={rid}")
    raw = b"".join(resp.rest())
    resp.close()
    assert in_band_error(protocol, raw) == message
    assert b"Hello" in raw  # what came before the failure was delivered
    assert time.monotonic() - started < IDLE + 4


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_trickling_upstream_keeps_the_stream_alive(fault_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                     protocol: str) -> None:
    rid = uuid.uuid4().hex
    # One event sent a byte at a time for longer than the keepalive interval: the client gets
    # keepalives meanwhile, then the event whole; the idle deadline counts bytes, not events.
    slow = chunk({"content": " slowly"})
    script(demo_upstream, rid, {"steps": [{"send": START + HELLO}, {"trickle": slow, "interval": 1.5 * IDLE / len(slow)},
                                          {"send": END}]})
    got, raw, _ = send(fault_proxy, protocol, "scripted-x", True, rid)
    assert got == 200 and text_of(protocol, completed(protocol, raw)) == "Hello slowly"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_4mb_tool_argument_line(fault_proxy: ProxyServer, demo_upstream: DemoUpstream, protocol: str) -> None:
    rid = uuid.uuid4().hex
    arguments = json.dumps({"data": "x" * (4 << 20)})
    call = chunk({"tool_calls": [{"index": 0, "id": "call_big", "type": "function",
                                  "function": {"name": "save", "arguments": ""}}]})
    big = chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]})
    script(demo_upstream, rid, {"steps": [{"send": START}, {"send": call}, {"send": big},
                                          {"send": chunk({}, "tool_calls") + "data: [DONE]\n\n"}]})
    got, raw, _ = send(fault_proxy, protocol, "scripted-x", True, rid, tools=True)
    assert got == 200
    answer = completed(protocol, raw)
    if protocol == "chat_completions":
        assert answer.choices[0].message.tool_calls[0].function.arguments == arguments
    elif protocol == "messages":
        assert answer.content[0].input == json.loads(arguments)
    else:
        assert answer.output[0].arguments == arguments


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_invalid_utf8_and_line_separators_in_json_strings(fault_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                          protocol: str) -> None:
    rid = uuid.uuid4().hex
    separators = chunk({"content": " a\u2028b\u2029c"})
    broken = START.encode().hex() + chunk({"content": "caf"}).encode().hex().replace(
        "636166", "636166c3")  # "caf" + a lone first byte of a two-byte character
    script(demo_upstream, rid, {"steps": [{"send_hex": broken}, {"send": separators}, {"send": END}]})
    got, raw, _ = send(fault_proxy, protocol, "scripted-x", True, rid)
    assert got == 200 and text_of(protocol, completed(protocol, raw)) == "caf\ufffd a\u2028b\u2029c"


# ---------------------------------------------------------------- whole (non-stream) answers


WHOLE: dict[str, tuple[dict[str, Any], str]] = {
    "not_json": ({"status": 200, "body": "this is not json"}, "upstream 'scripted' returned a body that is not a JSON object"),
    "too_big": ({"status": 200, "headers": {"Content-Type": "application/json"},
                 "body": '{"choices": [{"message": {"content": "' + "x" * (2 << 20) + '"}}]}'},
                "upstream 'scripted' answered with more than 1048576 bytes, the limit for a non-streamed answer "
                "(max_response_bytes)"),
    "truncated": ({"status": 200, "headers": {"Content-Type": "application/json", "Content-Length": "5000"},
                   "body": '{"choices": [{"message": {"content": "cut'}, "upstream 'scripted' returned a body that is "
                                                                           "not a JSON object"),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("fault", list(WHOLE))
def test_bad_whole_answers(fault_proxy: ProxyServer, demo_upstream: DemoUpstream, fault: str, protocol: str) -> None:
    answer, message = WHOLE[fault]
    rid = uuid.uuid4().hex
    script(demo_upstream, rid, answer)
    got, raw, elapsed = send(fault_proxy, protocol, "scripted-x", False, rid)
    assert got == 502 and error_message(protocol, raw) == message
    assert_protocol_error(protocol, raw)
    assert elapsed < READ + 4
