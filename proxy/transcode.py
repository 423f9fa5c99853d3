"""The stream relay contract the streaming engine drives, and its translating implementation.

Owns the seam between IO and translation: the engine hands each upstream SSE event to a
`StreamRelay` and yields the frames it returns. A relay is either a protocol's passthrough
(same protocol both sides) or a `Translation` — an upstream decoder feeding a client encoder
through the internal events. Both expose what the relay loop needs afterwards: usage for
accounting and whether (and how) the stream failed.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Protocol

from proxy.ir.events import Event, Failure, Start, UsageUpdate
from proxy.ir.response import ErrorInfo, Usage
from proxy.sse import SSEEvent


class StreamDecoder(Protocol):
    def feed(self, sse: SSEEvent) -> list[Event]: ...
    def close(self) -> list[Event]: ...


class StreamEncoder(Protocol):
    done: bool

    def encode(self, ev: Event) -> list[bytes]: ...
    def keepalive(self) -> list[bytes]: ...
    def fail(self, info: ErrorInfo) -> list[bytes]: ...


class StreamRelay(Protocol):
    usage: Usage | None
    failed: ErrorInfo | None

    @property
    def done(self) -> bool:  # the client's terminator has been produced
        ...

    def feed(self, sse: SSEEvent) -> list[bytes]: ...
    def close(self) -> list[bytes]: ...
    def keepalive(self) -> list[bytes]: ...
    def fail(self, info: ErrorInfo) -> list[bytes]: ...


class Translation:
    """Upstream protocol → internal events → client protocol."""

    def __init__(self, decoder: StreamDecoder, encoder: StreamEncoder) -> None:
        self.decoder = decoder
        self.encoder = encoder
        self.usage: Usage | None = None
        self.failed: ErrorInfo | None = None

    @property
    def done(self) -> bool:
        return self.encoder.done

    def feed(self, sse: SSEEvent) -> list[bytes]:
        return self._encode(self.decoder.feed(sse))

    def close(self) -> list[bytes]:
        return self._encode(self.decoder.close())

    def keepalive(self) -> list[bytes]:
        return self.encoder.keepalive()

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.failed is None and not self.encoder.done:
            self.failed = info
        return self.encoder.fail(info)

    def _encode(self, events: list[Event]) -> list[bytes]:
        frames: list[bytes] = []
        encode = self.encoder.encode
        for ev in events:
            if isinstance(ev, UsageUpdate | Start):
                self._watch_usage(ev)
            elif isinstance(ev, Failure) and self.failed is None:
                self.failed = ev.error
            frames.extend(encode(ev))
        return frames

    def _watch_usage(self, ev: UsageUpdate | Start) -> None:
        usage = ev.usage
        if usage is None:
            return
        if self.usage is None:
            self.usage = Usage()
        self.usage.merge(usage)
