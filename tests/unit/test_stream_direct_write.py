"""The streaming engine writing below the WSGI server (proxy/streaming/ with a ClientWriter):
after the first frame, which the server writes with the headers, every frame goes to the client's
socket from the engine itself — each its own HTTP chunk, byte for byte — and while the stream
waits, a chunk that arrives is relayed in the hub without resuming the stream's greenlet. A client
that stops reading holds the rest back (nothing lost, nothing reordered).

A real upstream over loopback (a thread writing one event at a time, each only once the client
has read the previous one) and a gevent socket pair as the client's connection; no server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import gevent
import gevent.socket
import greenlet
import pytest
import requests

from proxy.config import Streaming
from proxy.conversations.responses import ResponsesConversation
from proxy.conversations.store import ResponseStore
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.responses.passthrough import ResponsesPassthroughStream
from proxy.protocols.sse import SSEEvent, event_frame
from proxy.streaming import StreamingBody, StreamOutcome
from tests.unit.test_responses_request_and_store import RESP, passthrough_events

EVENTS = [b'data: {"n":%d,"text":"%s"}\n\n' % (i, b"x" * (i % 7)) for i in range(40)] + [b"data: [DONE]\n\n"]
BIG = [b'data: {"n":%d,"text":"%s"}\n\n' % (i, b"y" * 3000) for i in range(30)] + [b"data: [DONE]\n\n"]


class EchoRelay:
    """A passthrough that sends every event back as it came and is done after [DONE]."""

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.failed: ErrorInfo | None = None
        self.done = False

    def feed(self, sse: SSEEvent) -> list[bytes]:
        self.done = sse.data == b"[DONE]"
        return [b"data: " + sse.data + b"\n\n"]

    def close(self) -> list[bytes]:
        return []

    def keepalive(self) -> list[bytes]:
        return [b": keepalive\n\n"]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        self.failed, self.done = info, True
        return [b"data: error\n\n"]


class ChunkedWriter:
    """What the gunicorn adapter gives the engine, over a socket of the test's own."""

    def __init__(self, sock: gevent.socket.socket) -> None:
        self.socket = sock
        self.counted = 0

    def ready(self) -> bool:
        return True

    def wire(self, payload: bytes) -> bytes:
        return b"%X\r\n%b\r\n" % (len(payload), payload)

    def count(self, n: int) -> None:
        self.counted += n


class PacedUpstream:
    """Answers one request with a chunked SSE stream, one event per HTTP chunk, sending each event
    only after `next_event` is set (the test sets it once the client has the previous one)."""

    def __init__(self, events: list[bytes], end_with_last: bool = False) -> None:
        self.events = list(events)
        self.end_with_last = end_with_last  # the last event and the end of the body in one write
        self.next_event = threading.Semaphore(0)
        self.finished = threading.Event()  # set by the test when it is done with the connection
        self.sent_all = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i, event in enumerate(self.events):
                if not self.next_event.acquire(timeout=30):
                    return
                end = b"0\r\n\r\n" if self.end_with_last and i == len(self.events) - 1 else b""
                conn.sendall(b"%x\r\n%s\r\n%s" % (len(event), event, end))
            if not self.end_with_last:
                conn.sendall(b"0\r\n\r\n")
            self.sent_all.set()
            # A keep-alive connection stays open: the end of the body is all the proxy will see.
            self.finished.wait(30)

    def close(self) -> None:
        self.finished.set()
        self.listener.close()


@pytest.fixture()
def upstream() -> Iterator[PacedUpstream]:
    server = PacedUpstream(EVENTS)
    yield server
    server.close()


@pytest.fixture()
def big_upstream() -> Iterator[PacedUpstream]:
    server = PacedUpstream(BIG)
    yield server
    server.close()


def read_chunks(sock: gevent.socket.socket, buf: bytearray, count: int) -> list[bytes]:
    """`count` HTTP chunks from the client's side of the connection."""
    chunks: list[bytes] = []
    while len(chunks) < count:
        head_end = buf.find(b"\r\n")
        if head_end != -1:
            size = int(buf[:head_end], 16)
            if len(buf) >= head_end + 2 + size + 2:
                assert buf[head_end + 2 + size:head_end + 4 + size] == b"\r\n"
                chunks.append(bytes(buf[head_end + 2:head_end + 2 + size]))
                del buf[:head_end + 4 + size]
                continue
        data = sock.recv(65536)
        assert data, "the engine closed the client's connection"
        buf += data
    return chunks


def open_stream(session: requests.Session, upstream: PacedUpstream, relay: object, writer: ChunkedWriter,
                settings: Streaming | None = None,
                on_close: Callable[[StreamOutcome], None] = lambda outcome: None,
                on_end: Callable[[], None] | None = None) -> StreamingBody:
    """A stream from `upstream`, primed on its first event (released here) and writing below the
    server through `writer`, as the service's worker sets it up."""
    resp = session.get(f"http://127.0.0.1:{upstream.port}/v1/stream", stream=True)
    body = StreamingBody(resp, relay, settings or Streaming(), None, on_close, on_end)  # type: ignore[arg-type]
    upstream.next_event.release()
    body.prime()
    body.write_directly(writer)
    return body


def serve(body: StreamingBody, engine_side: gevent.socket.socket, writer: ChunkedWriter) -> gevent.Greenlet:
    """What the WSGI server does, in a greenlet: write what the body yields, then close it."""

    def run() -> None:
        for frame in body:  # what the server is given it writes, as gunicorn's Response.write does
            engine_side.sendall(writer.wire(frame))
        body.close()

    return gevent.spawn(run)


def read_paced(client_side: gevent.socket.socket, upstream: PacedUpstream | None, events: int,
               then: int = 0) -> list[bytes]:
    """`events` frames, one at a time — with `upstream`, each next event released only once the
    client has the previous one — and `then` frames more (the proxy's own, after the upstream's)."""
    buf = bytearray()
    received = read_chunks(client_side, buf, 1)
    for _ in range(events - 1):
        if upstream is not None:
            upstream.next_event.release()
        received += read_chunks(client_side, buf, 1)
    return received + read_chunks(client_side, buf, then)


def test_frames_after_the_first_go_out_from_the_engine_each_its_own_chunk_relayed_in_the_hub(
        upstream: PacedUpstream) -> None:
    client_side, engine_side = gevent.socket.socketpair()
    outcomes: list[StreamOutcome] = []
    with requests.Session() as session:
        writer = ChunkedWriter(engine_side)
        body = open_stream(session, upstream, EchoRelay(), writer, on_close=outcomes.append)
        yielded: list[bytes] = []
        resumed = [0]

        def serve_traced() -> None:
            # What the WSGI server does (`serve`), counting each time this greenlet resumes.
            me = greenlet.getcurrent()

            def count(event: str, args: tuple[greenlet.greenlet, greenlet.greenlet]) -> None:
                if event in ("switch", "throw") and args[1] is me:
                    resumed[0] += 1

            previous = greenlet.settrace(count)
            try:
                for frame in body:  # what the server is given it writes, as gunicorn's Response.write does
                    yielded.append(frame)
                    engine_side.sendall(writer.wire(frame))
            finally:
                greenlet.settrace(previous)
                body.close()

        server = gevent.spawn(serve_traced)
        received = read_paced(client_side, upstream, len(EVENTS))
        server.join(timeout=30)
        assert server.successful(), server.exception

    assert received == EVENTS  # one frame per chunk, in order, byte for byte
    assert yielded == [EVENTS[0]]  # the server wrote the first (with the headers), the engine the rest
    assert writer.counted == sum(map(len, EVENTS[1:]))  # the server's byte count for its access log
    assert len(outcomes) == 1 and outcomes[0].frames == len(EVENTS) and outcomes[0].error is None
    # One event at a time, each while the stream waited: relayed in the hub, without resuming the
    # stream's greenlet for each (it runs to start, to end, and for the odd wake-up between).
    assert resumed[0] < len(EVENTS) // 4, resumed[0]


def test_a_client_that_stops_reading_holds_the_rest_back_and_loses_nothing(big_upstream: PacedUpstream) -> None:
    upstream = big_upstream
    client_side, engine_side = gevent.socket.socketpair()
    # Small buffers, so the client's socket is full after a few frames.
    engine_side.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client_side.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    writer = ChunkedWriter(engine_side)
    with requests.Session() as session:
        body = open_stream(session, upstream, EchoRelay(), writer)
        for _ in BIG[1:]:
            upstream.next_event.release()  # then everything else at once
        server = serve(body, engine_side, writer)
        with gevent.Timeout(30):
            while not upstream.sent_all.is_set():  # the upstream sends all it has while the client reads nothing
                gevent.sleep(0.01)
        assert not server.dead  # parked on the full socket, with the rest of the stream held back
        received = read_chunks(client_side, bytearray(), len(BIG))
        server.join(timeout=30)
        assert server.successful(), server.exception
    assert received == BIG


def test_the_end_of_stream_callback_runs_once_in_the_streams_greenlet_before_its_last_frame(
        upstream: PacedUpstream) -> None:
    """Every chunk may be relayed in the hub, yet the callback that ends the stream (the Responses
    conversation keeping the answer, which may wait on Redis) runs where waiting is allowed — the
    stream's own greenlet — and before the frame that finishes the stream goes out."""
    client_side, engine_side = gevent.socket.socketpair()
    writer = ChunkedWriter(engine_side)
    ended: list[tuple[bool, int]] = []

    def on_end() -> None:
        ended.append((gevent.getcurrent() is gevent.get_hub(), writer.counted))

    with requests.Session() as session:
        server = serve(open_stream(session, upstream, EchoRelay(), writer, on_end=on_end), engine_side, writer)
        received = read_paced(client_side, upstream, len(EVENTS))
        server.join(timeout=30)
        assert server.successful(), server.exception
    assert received == EVENTS
    assert len(ended) == 1 and not ended[0][0]
    assert ended[0][1] == sum(map(len, EVENTS[1:-1]))  # the last frame was not written yet (the first is the server's)


class EndingRelay(EchoRelay):
    """A relay finished by the end of the upstream's body, not by an event (a Chat upstream that
    closes without `data: [DONE]`, which the passthrough then adds)."""

    def feed(self, sse: SSEEvent) -> list[bytes]:
        return [b"data: " + sse.data + b"\n\n"]

    def close(self) -> list[bytes]:
        self.done = True
        return [b"data: [DONE]\n\n"]


@pytest.mark.parametrize("pace", ["one event at a time", "all at once"])
def test_a_body_that_ends_with_its_last_event_ends_the_stream_then(pace: str) -> None:
    """The last event and the end of the body in one read: the stream ends at once, not when its
    keepalive deadline next wakes it (it once waited for that — a minute here — having read the
    end along with the last bytes and then waited on a socket that would say nothing more).
    Paced, the last read happens in the hub's relay step; all at once, in the stream's greenlet."""
    events = EVENTS[:-1]
    upstream = PacedUpstream(events, end_with_last=True)
    client_side, engine_side = gevent.socket.socketpair()
    writer = ChunkedWriter(engine_side)
    try:
        with requests.Session() as session, gevent.Timeout(20, AssertionError("the stream hung")):
            body = open_stream(session, upstream, EndingRelay(), writer,
                               Streaming(keepalive_interval=60, idle_timeout=120))
            if pace == "all at once":
                for _ in events[1:]:
                    upstream.next_event.release()
            server = serve(body, engine_side, writer)
            received = read_paced(client_side, upstream if pace == "one event at a time" else None, len(events),
                                  then=1)
            server.join()
            assert server.successful(), server.exception
    finally:
        upstream.close()
    assert received == [*events, b"data: [DONE]\n\n"]


def test_a_responses_stream_is_relayed_and_its_answer_kept_at_its_end() -> None:
    """A Responses passthrough: the client gets the upstream's events byte for byte, and the
    finished response, kept by the end-of-stream callback, is there for its next turn."""
    events = [event_frame(sse) for sse in passthrough_events(None)]
    store = ResponseStore()
    conversation = ResponsesConversation({"model": "m", "input": "hi"}, store)
    relay = ResponsesPassthroughStream()

    def on_end() -> None:
        assert relay.final is not None
        conversation.keep(relay.final, RESP, "r1", passthrough=True)

    upstream = PacedUpstream(events)
    client_side, engine_side = gevent.socket.socketpair()
    writer = ChunkedWriter(engine_side)
    try:
        with requests.Session() as session:
            server = serve(open_stream(session, upstream, relay, writer, on_end=on_end), engine_side, writer)
            received = read_paced(client_side, upstream, len(events))
            server.join(timeout=30)
            assert server.successful(), server.exception
    finally:
        upstream.close()
    assert received == events
    kept = store.get("resp_up")
    assert kept is not None and kept.response["status"] == "completed"
