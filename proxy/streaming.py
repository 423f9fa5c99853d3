"""The streaming engine (gevent): upstream bytes in, one SSE frame per write out.

Owns the life of one streamed response (DESIGN.md §2):
- a reader greenlet pulls the upstream body into a bounded queue, so a slow client stops the
  reading (TCP backpressure) instead of growing memory;
- the WSGI body waits on that queue with a timeout: upstream silence produces the protocol's
  keepalive every `keepalive_interval`, and silence past `idle_timeout` ends the stream with the
  protocol's in-band error and terminator;
- a watcher greenlet notices a client that hangs up while we are waiting on the upstream and
  stops the stream at once, closing the upstream connection;
- `prime()` runs the stream up to its first frame before any byte is committed to the client,
  so an upstream that fails on its very first event can still be retried or answered with an
  HTTP error status;
- `close()` (called by the WSGI server however the response ends) stops both greenlets, closes
  the upstream response and reports the outcome exactly once;
- `end_all_streams()` ends every live stream with the in-band error, for a shutdown whose
  graceful period is running out (proxy/worker.py).
Translation itself lives behind the `StreamRelay` it is given.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any

import gevent
import requests
from gevent.queue import Empty, Full, Queue
from gevent.socket import wait_read

from proxy.config import Streaming
from proxy.ir.response import ErrorInfo
from proxy.sse import SSEParser
from proxy.transcode import StreamRelay

log = logging.getLogger(__name__)

READ_SIZE = 16384
_EOF = object()
_CLIENT_GONE = object()
_LIVE: weakref.WeakSet[StreamingBody] = weakref.WeakSet()  # streams of this worker not yet closed


def end_all_streams(info: ErrorInfo) -> int:
    """End every live stream with `info` as its in-band error and the protocol's terminator.
    A stream whose queue is full is blocked writing to a slow client and is left alone.
    Returns how many streams were told."""
    told = 0
    for body in list(_LIVE):
        with contextlib.suppress(Full):
            body._queue.put_nowait(info)
            told += 1
    return told


class ClientGone(BaseException):
    """The client hung up before its answer started. A BaseException, like GreenletExit, so that no
    `except Exception` between here and the blocked upstream read can swallow it."""


@contextlib.contextmanager
def hangup_aborts(sock: socket.socket | None) -> Iterator[None]:
    """While the body runs — waiting for upstream headers, a non-streamed answer, a stream's first
    event — a client hang-up raises ClientGone in this greenlet, which abandons (and so closes) the
    upstream connection at once instead of after the upstream finishes working for nobody."""
    if sock is None:
        yield
        return
    target = gevent.getcurrent()
    fired = False

    def watch() -> None:
        nonlocal fired
        if hung_up(sock):
            fired = True
            gevent.kill(target, ClientGone)

    watcher = gevent.spawn(watch)
    try:
        yield
    finally:
        # A kill is delivered at this greenlet's next switch. If the watcher fires as the body
        # finishes, that switch would come later — mid-stream, or in the server's write — and
        # surface there as an unhandled error. So wait for the watcher to be gone, and take any
        # kill it sent here; the client has left, and the stream's own watcher or the failed
        # write will say so where it matters.
        with contextlib.suppress(ClientGone):
            watcher.kill(block=True)
            if fired:
                gevent.sleep(0)


def hung_up(sock: socket.socket) -> bool:
    """Block until the client's socket is readable; True if that is because the client left (EOF or
    reset), False if it sent more data (pipelining), which is not a hang-up."""
    try:
        wait_read(sock.fileno())
        return not sock.recv(1, socket.MSG_PEEK)
    except OSError:
        return True


class EarlyStreamFailure(Exception):
    """The upstream failed before the client received anything: the caller may retry."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.message)
        self.info = info


class StreamOutcome:
    """How a stream ended, for the relay's accounting."""

    __slots__ = ("client_gone", "error", "frames", "usage")

    def __init__(self) -> None:
        self.frames = 0
        self.client_gone = False
        self.error: ErrorInfo | None = None
        self.usage: Any = None


class StreamingBody:
    """A WSGI response iterable that relays one upstream stream."""

    def __init__(
        self,
        upstream: requests.Response,
        relay: StreamRelay,
        settings: Streaming,
        client_socket: socket.socket | None,
        on_close: Callable[[StreamOutcome], None],
    ) -> None:
        self._upstream = upstream
        self._relay = relay
        self._settings = settings
        self._on_close: Callable[[StreamOutcome], None] | None = on_close
        self._queue: Queue = Queue(maxsize=settings.queue_size)
        self._parser = SSEParser()
        self._outcome = StreamOutcome()
        self._primed: list[bytes] = []
        self._reader = gevent.spawn(self._read_upstream)
        self._watcher = gevent.spawn(self._watch_client, client_socket) if client_socket is not None else None
        self._frames = self._run()
        _LIVE.add(self)

    # ------------------------------------------------------------ WSGI iterable

    def prime(self) -> None:
        """Produce the first frame before the response is committed; raise EarlyStreamFailure if
        the upstream's first event is already a failure (then the caller must `close()`)."""
        try:
            first = next(self._frames)
        except StopIteration:
            first = None
        failed = self._relay.failed
        if failed is not None:  # nothing has reached the client yet: the caller judges, then closes
            raise EarlyStreamFailure(failed)
        if first is not None:
            self._primed.append(first)

    def __iter__(self) -> Iterator[bytes]:
        yield from self._primed
        self._primed = []
        yield from self._frames

    def close(self) -> None:
        if self._on_close is None:
            return
        on_close, self._on_close = self._on_close, None
        _LIVE.discard(self)
        self._frames.close()
        if self._watcher is not None:
            self._watcher.kill(block=False)
        self._reader.kill(block=True, timeout=1)
        self._upstream.close()
        self._outcome.usage = self._relay.usage
        if self._outcome.error is None:
            self._outcome.error = self._relay.failed
        if not self._relay.done and self._outcome.error is None:
            # Closed before the stream finished and with nothing wrong upstream: the client left,
            # whether the watcher saw it or a write to its socket failed.
            self._outcome.client_gone = True
        try:
            on_close(self._outcome)
        except Exception:
            log.exception("stream accounting failed")

    # ------------------------------------------------------------ the loop

    def _run(self) -> Generator[bytes, None, None]:
        relay, queue, parser, outcome = self._relay, self._queue, self._parser, self._outcome
        interval = self._settings.keepalive_interval
        idle_timeout = self._settings.idle_timeout
        last_data = last_write = time.monotonic()
        while not relay.done:
            now = time.monotonic()
            wait = min(last_write + interval, last_data + idle_timeout) - now
            try:
                item = queue.get(timeout=max(wait, 0.0))
            except Empty:
                now = time.monotonic()
                if now - last_data >= idle_timeout:
                    info = ErrorInfo("timeout", f"upstream sent nothing for {idle_timeout:g}s", 504)
                    outcome.error = info
                    frames = relay.fail(info)
                else:
                    frames = relay.keepalive()
            else:
                if item is _CLIENT_GONE:
                    outcome.client_gone = True
                    return
                if item is _EOF:
                    frames = [f for ev in parser.flush() for f in relay.feed(ev)]
                    frames += relay.close()
                elif isinstance(item, ErrorInfo):
                    outcome.error = item
                    frames = relay.fail(item)
                else:
                    last_data = time.monotonic()
                    frames = self._translate(item)
            for frame in frames:
                outcome.frames += 1
                yield frame
            if frames:
                last_write = time.monotonic()

    def _translate(self, data: bytes) -> list[bytes]:
        """Upstream bytes → client frames. A bug in a codec must not cut the client's stream off
        without its terminator: it becomes the protocol's in-band error, and the log has the rest."""
        try:
            return [f for ev in self._parser.feed(data) for f in self._relay.feed(ev)]
        except Exception:
            log.exception("translating the upstream stream failed")
            info = ErrorInfo("api_error", "The proxy could not translate the upstream's stream; "
                                          "its log has the details.", 500)
            self._outcome.error = info
            return self._relay.fail(info)

    def _read_upstream(self) -> None:
        """Reader greenlet: upstream body → queue. Blocks on a full queue (backpressure)."""
        read = self._upstream.raw.read1
        put = self._queue.put
        try:
            while True:
                data = read(READ_SIZE)
                if not data:
                    break
                put(data)
            put(_EOF)
        except gevent.GreenletExit:
            raise
        except Exception as exc:
            put(_read_error(exc))

    def _watch_client(self, sock: socket.socket) -> None:
        """Watcher greenlet: a client that hangs up makes its socket readable with EOF."""
        if not hung_up(sock):
            return
        self._reader.kill(block=False)
        # If the queue is full the body is blocked writing to the client, and that write will fail.
        with contextlib.suppress(Full):
            self._queue.put_nowait(_CLIENT_GONE)


def _read_error(exc: Exception) -> ErrorInfo:
    text = f"{type(exc).__name__}: {exc}".lower()
    if "timed out" in text or "timeout" in text:
        return ErrorInfo("timeout", "upstream stopped sending before the stream finished (read timeout)", 504)
    return ErrorInfo("upstream_error", "the upstream connection broke before the stream finished", 502)
