"""The direct-write mode: a stream that writes its frames to the client's socket itself, below the
WSGI server, and the hub's relay step.

Owns, given a `ClientWriter` (`write_directly`, from the server's adapter), putting frames on the
client's socket one `send` per step, what the socket did not take written by the greenlet (a
slow client stops the reading), and — while the greenlet waits — relaying a chunk whole in the
hub (read, translate, send) without waking it, as long as the client's socket takes the bytes
(docs/architecture.md §6.1). A chunk that finishes or fails the stream is always handed to the
greenlet, so the end-of-stream callback never runs in the hub.
"""

from __future__ import annotations

import time

from proxy.streaming.fields import ClientWriter, StreamFields
from proxy.upstream.body import UpstreamBodyError


class DirectWrite(StreamFields):
    __slots__ = ()

    def write_directly(self, writer: ClientWriter) -> None:
        """Write the frames after the first to the client's socket itself, framed by `writer`,
        instead of yielding them to the server (which still writes the status line, the headers,
        the first frame and the end of the body)."""
        self._writer = writer
        self._os_socket = getattr(writer.socket, "_sock", None)

    def _send(self, frames: list[bytes]) -> bool:
        """Put `frames` on the client's socket in one `send` — each frame its own HTTP chunk, as
        when the server writes them — without waiting; what it does not take is left in `_unsent`
        for the greenlet to write. True if it took everything."""
        writer = self._writer
        assert writer is not None
        if len(frames) == 1:
            size, wire = len(frames[0]), writer.wire(frames[0])
        else:
            size, wire = sum(map(len, frames)), b"".join(map(writer.wire, frames))
        try:
            sent = self._os_socket.send(wire)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            sent = 0  # the client is gone: the greenlet's write raises it where the server expects it
        self._outcome.frames += len(frames)
        writer.count(size)
        if sent == len(wire):
            return True
        self._unsent = wire[sent:]
        return False

    def _flush(self) -> None:
        """Write what the client's socket did not take, waiting for it to drain (a slow client
        stops the reading here: the upstream watcher stops while this greenlet is not waiting)."""
        unsent, self._unsent = self._unsent, None
        assert self._writer is not None and unsent is not None
        self._writer.socket.sendall(unsent)
        self._last_write = time.monotonic()

    def _relay_in_hub(self) -> bool:
        """The upstream's socket became readable while the greenlet waits: relay that chunk here,
        in the hub — read, translate, send — and leave the greenlet parked. False when the
        greenlet must run: the client's socket did not take everything, the stream ends or
        fails, or the read was not plain bytes (what it found is handed over as it is)."""
        if self._interrupted is not None or self._hung_up:
            return False
        try:
            try:
                data = self._body.read()
            except UpstreamBodyError as exc:
                self._carried_read = exc
                return False
            if data is None:
                return True  # nothing after all: keep waiting
            if not data:
                self._carried_read = data
                return False
            self._last_data = now = time.monotonic()
            frames = self._translate(data)
            if self._relay.done or self._relay.failed is not None or self._outcome.error is not None:
                self._handoff = frames  # the greenlet writes the last frames and ends the stream
                return False
            if frames:
                if self._tap is not None:
                    self._tap.client_frames(frames)
                if not self._send(frames):
                    return False
                self._last_write = now
            return not self._body.pending()
        except Exception as exc:  # a bug here must not kill the hub: the greenlet raises it
            self._hub_error = exc
            return False
