"""The stream relay contract the streaming engine drives, its two shared implementations, and
the words every upstream stream reader uses for a stream that breaks.

Owns the seam between IO and translation: the engine hands each upstream SSE event to a
`StreamRelay` and yields the frames it returns. A relay is either a protocol's passthrough
(same protocol both sides; `WatchedPassthrough` serves the protocols with named events) or a
`Translation` — an upstream decoder feeding a client encoder through the internal events. Each
exposes what the relay loop needs afterwards, as data: usage for accounting, whether (and how) the
stream failed, the final response object a conversation keeps (`final`) and what was left out for
this client (`dropped`) — read by the relay when the stream ends, never handed to a callback.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Protocol

from proxy.ir.events import Delta, Event, Failure, Finish, Start, UsageUpdate
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.sse import SSEEvent, event_frame, named_after_type

# What a relay or encoder that never leaves anything out says it dropped: one shared, read-only
# empty mapping, not an empty dict of its own held by every open stream (64 bytes each).
NOTHING_DROPPED: Mapping[str, int] = MappingProxyType({})


class StreamDecoder(Protocol):
    def feed(self, sse: SSEEvent) -> list[Event]: ...
    def close(self) -> list[Event]: ...


class StreamEncoder(Protocol):
    done: bool

    # What it finished with, read when the stream ends: the final response object (for a protocol
    # whose conversations the proxy keeps; None until it finishes, and for a failure) and what it
    # left out for this client, by what ("reasoning": 2).
    @property
    def final(self) -> dict[str, Any] | None: ...

    @property
    def dropped(self) -> Mapping[str, int]: ...

    def encode(self, ev: Event) -> list[bytes]: ...
    def keepalive(self) -> list[bytes]: ...
    def fail(self, info: ErrorInfo) -> list[bytes]: ...


class StreamRelay(Protocol):
    usage: Usage | None
    failed: ErrorInfo | None

    @property
    def final(self) -> dict[str, Any] | None:  # see StreamEncoder
        ...

    @property
    def dropped(self) -> Mapping[str, int]: ...

    @property
    def done(self) -> bool:  # the client's terminator has been produced
        ...

    def feed(self, sse: SSEEvent) -> list[bytes]: ...
    def close(self) -> list[bytes]: ...
    def keepalive(self) -> list[bytes]: ...
    def fail(self, info: ErrorInfo) -> list[bytes]: ...


def parse_payload(text: str, noun: str) -> dict[str, Any] | ErrorInfo:
    """An upstream event's JSON object, or the stream error it is when it is not one — in the same
    words from every stream decoder and the Chat passthrough (`noun`: "chunk" for Chat, "event"
    for the protocols with named events). The caller decodes the bytes, invalid UTF-8 as U+FFFD
    (`decode("utf-8", "replace")`): the Chat passthrough must know whether any was replaced, and
    json.loads on text skips the encoding detection it runs on bytes. Called for every event."""
    try:
        payload = json.loads(text)
    except ValueError:
        return ErrorInfo("upstream_error", f"upstream sent a malformed JSON {noun} in its stream", 502)
    if isinstance(payload, dict):
        return payload
    return ErrorInfo("upstream_error", f"upstream sent a stream {noun} that is not a JSON object", 502)


def closed_early(started: bool) -> ErrorInfo:
    """The upstream closed the stream before it finished: it broke off, or never began."""
    if not started:
        return ErrorInfo("upstream_error", "upstream closed the stream without sending any event", 502)
    return ErrorInfo("upstream_error", "upstream closed the stream before it finished", 502)


def add_usage(total: Usage | None, ev: Event) -> Usage | None:
    """Fold the usage an event reports (Start, UsageUpdate) into the running total."""
    usage = ev.usage if isinstance(ev, Start | UsageUpdate) else None
    if usage is None:
        return total
    total = total or Usage()
    total.merge(usage)
    return total


class AnswerFacts:
    """What a streamed answer said of itself — its id, the model that produced it, why it finished —
    noted from the IR's `Start` and `Finish` as they pass, for traces when the stream ends."""

    __slots__ = ("finish_reason", "response_id", "response_model")

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.finish_reason: str | None = None

    def note(self, ev: Event) -> None:
        if isinstance(ev, Start):
            self.response_id, self.response_model = ev.id or None, ev.model or None
        elif isinstance(ev, Finish):
            self.finish_reason = ev.reason


class WatchedPassthrough:
    """Same protocol both sides, for protocols whose events are named (Messages, Responses): each
    upstream event goes to the client as it came, while that protocol's own stream decoder watches
    it for usage, the end of the stream and failures. Subclasses say how their protocol spells a
    keepalive and a failure, and what to do with a failure the upstream reported itself."""

    def __init__(self, decoder: StreamDecoder) -> None:
        self.usage: Usage | None = None
        self.failed: ErrorInfo | None = None
        self.done = False
        self.watch = decoder
        self.final: dict[str, Any] | None = None
        self.dropped: Mapping[str, int] = NOTHING_DROPPED  # a subclass that drops replaces it
        self.answer = AnswerFacts()

    def feed(self, sse: SSEEvent) -> list[bytes]:
        if self.done:
            return []
        sse = named_after_type(sse)
        for ev in self.watch.feed(sse):
            if ev.__class__ is Delta:  # most events: nothing to note
                continue
            self.usage = add_usage(self.usage, ev)
            self.answer.note(ev)
            if isinstance(ev, Failure):
                self.failed = ev.error
                return self.upstream_failed(sse, ev.error)
            if isinstance(ev, Finish):
                self.done = True
        return self.relay(sse)

    def relay(self, sse: SSEEvent) -> list[bytes]:
        """What the client gets for an upstream event that did not fail: the event as it came."""
        return [event_frame(sse)]

    def close(self) -> list[bytes]:
        for ev in self.watch.close():
            if isinstance(ev, Failure):
                return self.fail(ev.error)
        return []

    def keepalive(self) -> list[bytes]:
        raise NotImplementedError

    def fail(self, info: ErrorInfo) -> list[bytes]:
        raise NotImplementedError

    def upstream_failed(self, sse: SSEEvent, info: ErrorInfo) -> list[bytes]:
        """The decoder judged this event a failure: the upstream's own error, or a broken event."""
        raise NotImplementedError


class Translation:
    """Upstream protocol → internal events → client protocol."""

    def __init__(self, decoder: StreamDecoder, encoder: StreamEncoder) -> None:
        self.decoder = decoder
        self.encoder = encoder
        self.usage: Usage | None = None
        self.failed: ErrorInfo | None = None
        self.answer = AnswerFacts()

    @property
    def done(self) -> bool:
        return self.encoder.done

    @property
    def final(self) -> dict[str, Any] | None:
        return self.encoder.final

    @property
    def dropped(self) -> Mapping[str, int]:
        return self.encoder.dropped

    @property
    def content_type(self) -> str | None:
        """What the client's writer streams, when not SSE (proxy.relay.attempt.stream_headers)."""
        return getattr(self.encoder, "content_type", None)

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
            if ev.__class__ is not Delta:  # a delta, most events, carries no usage and no fact
                self.usage = add_usage(self.usage, ev)
                self.answer.note(ev)
                if isinstance(ev, Failure) and self.failed is None:
                    self.failed = ev.error
            frames.extend(encode(ev))
        return frames
