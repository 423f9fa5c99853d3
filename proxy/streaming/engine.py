"""`StreamingBody`: one streamed response, upstream bytes in, one SSE frame per write out.

Owns the life of one streamed response (docs/architecture.md §6), all in the one greenlet that
writes to the client — the WSGI body generator:
- it reads the upstream only after the client's socket took the previous frames, so a slow client
  stops the reading (TCP backpressure) and memory per stream stays at one read;
- when the upstream has nothing, it waits at once for the upstream socket, for its own deadline
  and for the client's socket: upstream silence produces the protocol's keepalive every
  `keepalive_interval`, silence past `idle_timeout` ends the stream with the protocol's in-band
  error and terminator, and a client that hangs up ends the stream and closes the upstream;
- `prime()` runs the stream up to its first frame before any byte is committed to the client,
  so an upstream that fails on its very first event can still be retried or answered with an
  HTTP error status — and, given the time the client's first byte is due, sends the keepalive
  then rather than leave the client waiting on an upstream that has not begun;
- `on_end`, the relay's end-of-stream callback, runs once when the stream has finished, before
  the frames that finish it are written, in the stream's own greenlet — never in the event loop's
  callback — so it may wait (the Responses conversation keeps the final answer there, over the
  network with a shared store, before the client sees `response.completed`);
- the outcome is reported exactly once: as soon as the last frame is written (before the server
  ends the response, so what accounting records is there by the time the client has it all), or
  by `close()` — called by the WSGI server however the response ends, which also closes the
  upstream response;
- `end_all_streams()` ends every live stream with the in-band error, for a shutdown whose
  graceful period is running out (proxy/serving/worker.py).
There is no reader greenlet: an earlier design fed a bounded queue from one, and its two hand-offs
per chunk (four hub switches and a timer) were the largest per-chunk cost in the benchmark's
profiles, so the body waits on the sockets itself. Reading the body without blocking is
`proxy.upstream.body`'s; translation lives behind the `StreamRelay` it is given.
Given a `ClientWriter` (`write_directly`), the body writes its frames to the client's socket itself
(proxy.streaming.direct); without one it yields its frames to whoever iterates it, as a WSGI body.
How it waits is proxy.streaming.waiting's.
"""

from __future__ import annotations

import logging
import socket
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any

import gevent
import gevent.select
import requests

from proxy.config import Streaming
from proxy.ir.response import ErrorInfo
from proxy.protocols.sse import SSEParser
from proxy.protocols.transcode import StreamRelay
from proxy.streaming.direct import DirectWrite
from proxy.streaming.fields import ClientWriter, EarlyStreamFailure, StreamOutcome, StreamTap
from proxy.streaming.waiting import CLIENT, DEADLINE, INTERRUPT, Waiting
from proxy.upstream.body import READ_SIZE, UpstreamBody, UpstreamBodyError

log = logging.getLogger("proxy.streaming")  # the engine's, as before it was split: log lines unchanged

# After the terminator: how long and how far the end of an upstream body is read to keep its connection.
FINISH_WITHIN, FINISH_MAX_BYTES = 0.5, 65536
_LIVE: weakref.WeakSet[StreamingBody] = weakref.WeakSet()  # streams of this worker not yet closed


def end_all_streams(info: ErrorInfo) -> int:
    """End every live stream with `info` as its in-band error and the protocol's terminator: at
    once if it is waiting on its upstream, after its current write if it is writing to a slow
    client. Returns how many streams were told."""
    bodies = list(_LIVE)
    for body in bodies:
        body.interrupt(info)
    return len(bodies)



class StreamingBody(DirectWrite, Waiting):
    """A WSGI response iterable that relays one upstream stream."""

    __slots__ = ()  # the fields are StreamFields' (proxy.streaming.fields)

    def __init__(
        self,
        upstream: requests.Response,
        relay: StreamRelay,
        settings: Streaming,
        client_socket: socket.socket | None,
        on_close: Callable[[StreamOutcome], None],
        on_end: Callable[[], None] | None = None,
        tap: StreamTap | None = None,
    ) -> None:
        self._upstream = upstream
        self._tap = tap  # the request log's copy of the upstream's bytes and the client's frames
        self._body = UpstreamBody(upstream)
        self._relay = relay
        self._settings = settings
        self._client = client_socket
        self._on_close: Callable[[StreamOutcome], None] | None = on_close
        self._on_end = on_end
        self._closed = False
        self._parser = SSEParser()
        self._outcome = StreamOutcome()
        self._primed: list[bytes] = []
        self._interrupted: ErrorInfo | None = None
        # How many frames came before the stream failed: none means it failed on its first event,
        # which prime() leaves for the relay to retry or answer with an HTTP status.
        self._frames_before_failure: int | None = None
        self._waiting: Any = None  # the greenlet parked in _wait, if it is
        hub = gevent.get_hub()
        self._hub, self._loop = hub, hub.loop
        self._upstream_ready = self._loop.io(self._body.fileno(), 1)
        self._client_readable = self._loop.io(client_socket.fileno(), 1) if client_socket is not None else None
        self._client_signalled = False  # the client's socket became readable while we were writing
        self._hung_up = False  # the client left, as its transport said (hang_up)
        self._timer: Any = None
        self._last_data = self._last_write = 0.0  # monotonic times the upstream sent, we wrote
        self._first_byte_by: float | None = None  # while priming: when the client's first byte is due
        self._late: ErrorInfo | None = None
        self._read_again = True  # False after a short read: the socket is drained until it is readable
        # Writing below the server (write_directly): the writer, the OS socket under its gevent
        # socket, and what the hub's relay step hands the greenlet — wire bytes the client's socket
        # did not take, frames that end the stream, a read result the hub must not act on — or an
        # exception it hit.
        self._writer: ClientWriter | None = None
        self._os_socket: Any = None
        self._unsent: bytes | None = None
        self._handoff: list[bytes] | None = None
        self._carried_read: bytes | UpstreamBodyError | None = None
        self._hub_error: Exception | None = None
        self._frames = self._run()
        _LIVE.add(self)

    # ------------------------------------------------------------ WSGI iterable

    def prime(self, first_byte_by: float | None = None, late: ErrorInfo | None = None) -> None:
        """Produce the first frame before the response is committed; raise EarlyStreamFailure if
        the upstream's first event is already a failure (then the caller must `close()`).
        With `first_byte_by` (a monotonic time), the client's first byte is due then: if the
        upstream has sent no event by that time the first frame is the protocol's keepalive, or,
        where the protocol has none to give before the upstream's first event, the failure `late`."""
        self._first_byte_by, self._late = first_byte_by, late
        try:
            first = next(self._frames)
        except StopIteration:
            first = None
        finally:
            self._first_byte_by = None
        failed = self._relay.failed
        if failed is not None and self._frames_before_failure == 0:
            raise EarlyStreamFailure(failed)  # nothing reached the client yet: the caller judges, then closes
        if first is not None:
            self._primed.append(first)

    def __iter__(self) -> Iterator[bytes]:
        yield from self._primed
        self._primed = []
        yield from self._frames
        # Every frame is written: the outcome is final. Reported now, before the server sends the
        # end of the response, so whatever the accounting records is there when the client is done.
        self._report()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        self._frames.close()
        self._stop_watching()
        if self._relay.done:
            self._end()  # finished, but the last frames did not go out (the client left)
            if self._body.worth_finishing():
                self._finish_body()
        self._body.close()
        self._upstream.close()
        self._report()

    def _finish_body(self) -> None:
        """The client has its whole answer but the upstream's body has not ended yet — its last
        bytes (a chunked body's `0` chunk, say) were still on their way when the protocol's
        terminator arrived. Read up to that end, briefly, so the connection goes back to the pool
        instead of being closed: the next request then skips a new connection (and its TLS
        handshake). Run after the server has written the client's end of the response, so only
        the client's next request on this connection waits, at most FINISH_WITHIN seconds."""
        deadline = time.monotonic() + FINISH_WITHIN
        left_over = 0
        try:
            while left_over <= FINISH_MAX_BYTES:
                data = self._body.read()
                if data == b"":
                    return
                if data is not None:  # bytes after the protocol's terminator: not for anyone
                    left_over += len(data)
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                gevent.select.select([self._body.fileno()], [], [], remaining)
        except UpstreamBodyError:
            return

    def _end(self) -> None:
        """Call `on_end`, once: the stream has finished (its terminal frames are not written yet)."""
        if self._on_end is None:
            return
        on_end, self._on_end = self._on_end, None
        try:
            on_end()
        except Exception:
            log.exception("the stream's end-of-stream callback failed")

    def _report(self) -> None:
        """Hand the outcome to `on_close`, once."""
        if self._on_close is None:
            return
        on_close, self._on_close = self._on_close, None
        self._outcome.usage = self._relay.usage
        if self._outcome.error is None:
            self._outcome.error = self._relay.failed
        if not self._relay.done and self._outcome.error is None:
            # Ended before the stream finished and with nothing wrong upstream: the client left,
            # whether the wait saw it or a write to its socket failed.
            self._outcome.client_gone = True
        try:
            on_close(self._outcome)
        except Exception:
            log.exception("stream accounting failed")

    def interrupt(self, info: ErrorInfo) -> None:
        """End the stream with `info` in-band: now if it is waiting, else at its next step."""
        self._interrupted = info
        if self._waiting is not None:
            self._loop.run_callback(self._wake, INTERRUPT)

    def hang_up(self) -> None:
        """The client left, as a transport that reads the client's socket itself says (a WebSocket:
        its reader sees the close frame or the end of the connection, so there is no socket here to
        watch): the stream ends as if its socket had been seen to close — now if it is waiting,
        else at its next step."""
        self._hung_up = True
        if self._waiting is not None:
            self._loop.run_callback(self._wake, CLIENT)

    # ------------------------------------------------------------ the loop

    def _run(self) -> Generator[bytes, None, None]:
        relay, outcome = self._relay, self._outcome
        self._last_data = self._last_write = time.monotonic()
        try:
            while not relay.done or self._unsent is not None or self._handoff is not None:
                if self._unsent is not None:  # the hub's step left bytes the client's socket did not take
                    self._flush()
                    continue
                if self._hub_error is not None:
                    raise self._hub_error
                if self._handoff is not None:
                    frames: list[bytes] | None = self._handoff
                    self._handoff = None
                else:
                    frames = self._step()
                if frames is None:
                    outcome.client_gone = True
                    return
                if relay.done and self._on_end is not None:
                    self._end()  # before the frames that finish the stream go out
                if not frames:
                    continue
                if self._tap is not None:
                    self._tap.client_frames(frames)
                if self._os_socket is not None and self._writer is not None and self._writer.ready():
                    self._send(frames)
                    if self._unsent is not None:
                        self._flush()
                else:
                    for frame in frames:
                        outcome.frames += 1
                        yield frame
                self._last_write = time.monotonic()
        finally:
            # The upstream's socket may already serve another request from the pool.
            self._stop_watching()

    def _step(self) -> list[bytes] | None:
        """The frames to send next — none yet if only a wait ended; None if the client left."""
        relay = self._relay
        if self._hung_up:
            return None
        if self._interrupted is not None:
            return self._fail(self._interrupted)
        try:
            data = self._read()
        except UpstreamBodyError as exc:
            log.info("upstream stream broke off: %s", exc.detail)
            return self._fail(exc.info)
        if data:
            self._last_data = time.monotonic()
            return self._translate(data)
        if data is not None:  # b"": the upstream's body ended
            frames = self._translate(None)
            if not relay.done:  # a codec that cannot finish must still end the client's stream
                frames += self._fail(ErrorInfo("upstream_error", "the upstream stream ended before it finished", 502))
            return frames
        # Nothing yet: wait for the upstream, the next deadline or the client.
        interval, idle_timeout = self._settings.keepalive_interval, self._settings.idle_timeout
        deadline = min(self._last_write + interval, self._last_data + idle_timeout)
        if self._first_byte_by is not None:
            deadline = min(deadline, self._first_byte_by)
        woke = self._wait(deadline - time.monotonic())
        if woke is CLIENT:
            return None if self._hung_up or self._client_left() else []
        if woke is not DEADLINE:
            return []
        now = time.monotonic()
        if now - self._last_data >= idle_timeout:
            return self._fail(ErrorInfo("timeout", f"upstream sent nothing for {idle_timeout:g}s", 504))
        if now - self._last_write >= interval:
            return relay.keepalive()
        if self._first_byte_by is not None and now >= self._first_byte_by:
            frames = relay.keepalive()
            return frames or self._fail(self._late or ErrorInfo("timeout", "upstream sent no event in time", 504))
        return []

    def _read(self) -> bytes | None:
        """The upstream's next bytes (see UpstreamBody.read): what the hub's step handed over, else
        a read — skipped after a short one until the socket is readable again, since a read that
        finds nothing costs a system call and an exception."""
        carried = self._carried_read
        if carried is not None:
            self._carried_read = None
            if isinstance(carried, UpstreamBodyError):
                raise carried
            return carried
        if not self._read_again and not self._body.pending():
            return None
        data = self._body.read()
        self._read_again = data is None or len(data) >= READ_SIZE
        return data

    def _translate(self, data: bytes | None) -> list[bytes]:
        """Upstream bytes (None: the end of them) → client frames. A bug in a codec must not cut
        the client's stream off without its terminator: it becomes the protocol's in-band error,
        and the log has the rest."""
        relay = self._relay
        frames: list[bytes] = []
        if data is not None and self._tap is not None:
            self._tap.upstream_chunk(data)
        try:
            for ev in self._parser.feed(data) if data is not None else self._parser.flush():
                produced = relay.feed(ev)
                if relay.failed is not None and self._frames_before_failure is None:
                    self._frames_before_failure = self._outcome.frames + len(frames)
                frames += produced
            if data is None:
                produced = relay.close()
                if relay.failed is not None and self._frames_before_failure is None:
                    self._frames_before_failure = self._outcome.frames + len(frames)
                frames += produced
        except Exception:
            log.exception("translating the upstream stream failed")
            return frames + self._fail(ErrorInfo("api_error", "The proxy could not translate the upstream's "
                                                              "stream; its log has the details.", 500))
        return frames

    def _fail(self, info: ErrorInfo) -> list[bytes]:
        """End the client's stream with `info` as its in-band error."""
        self._outcome.error = info
        if self._frames_before_failure is None:
            self._frames_before_failure = self._outcome.frames
        return self._relay.fail(info)
