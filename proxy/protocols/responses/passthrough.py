"""Passthrough for streams: a Responses client in front of a Responses upstream.

Owns relaying the upstream's events byte for byte — event types and fields the proxy does not
know included — while watching them, through the Responses stream decoder, for what the relay
loop needs: usage, whether the response finished, and whether (and how) it failed — and, once it
finished, exposes the final response object (the decoder keeps the last one announced) as `final`,
which the relay keeps before that event reaches the client (the streaming engine's end-of-stream
callback), so its next turn finds it. When the proxy
sent the conversation by value instead of the client's `previous_response_id`, the response
objects of the lifecycle events (a handful per stream) say the id the client sent, as they would
had the upstream resolved it. Only when the
upstream breaks off before `response.completed` / `incomplete` / `failed` does the proxy add
events of its own: `error`, then `response.failed` carrying the response object the upstream
announced, numbered on from the upstream's last `sequence_number` — what Codex and the SDKs need
to stop waiting.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.response import ErrorInfo
from proxy.protocols.responses.response import error_event_error, new_id
from proxy.protocols.responses.stream_decode import ResponsesStreamDecoder
from proxy.protocols.responses.vocabulary import failure_code
from proxy.protocols.sse import SSEEvent, dumps, event_frame, loads, named_after_type, named_frame
from proxy.protocols.transcode import WatchedPassthrough

TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")
LIFECYCLE_EVENTS = ("response.created", "response.queued", "response.in_progress", *TERMINAL_EVENTS)


class ResponsesPassthroughStream(WatchedPassthrough):
    watch: ResponsesStreamDecoder

    def __init__(self, previous_response_id: str | None = None) -> None:
        super().__init__(ResponsesStreamDecoder(relayed=True))
        self._relayed_after_error = 0  # events relayed after the upstream's `error`
        self._errored = False  # the upstream sent `error`; its `response.failed` is still to come
        self._previous = previous_response_id  # what the client chained from, to be echoed

    def feed(self, sse: SSEEvent) -> list[bytes]:
        if self._previous is not None:
            sse = self._echo_previous(named_after_type(sse))
        if self._errored and not self.done:  # relay what follows the upstream's `error` until its end
            self._relayed_after_error += 1
            self.done = sse.event in TERMINAL_EVENTS
            return [event_frame(sse)]
        frames = super().feed(sse)
        if self.done and self.final is None and self.failed is None:  # `response.completed` / `incomplete`
            self.final = self.watch.response
        return frames

    def _echo_previous(self, sse: SSEEvent) -> SSEEvent:
        if sse.event not in LIFECYCLE_EVENTS:
            return sse
        try:
            payload = loads(sse.data)
        except ValueError:
            return sse  # the watching decoder reports it
        response = payload.get("response") if isinstance(payload, dict) else None
        if not isinstance(response, dict) or response.get("previous_response_id") == self._previous:
            return sse
        response["previous_response_id"] = self._previous
        return SSEEvent(sse.event, dumps(payload))

    def close(self) -> list[bytes]:
        if self._errored and not self.done:  # the upstream said `error` but never `response.failed`
            self.done = True
            return [self._failed_event(self.failed or ErrorInfo("upstream_error", "upstream failed", 502))]
        return super().close()

    def keepalive(self) -> list[bytes]:
        # Codex's idle timer counts events, not comments (see the Responses stream encoder).
        if self.watch.response is None:
            return []
        return [self._event("response.in_progress", response={**self.watch.response, "status": "in_progress"})]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.done:
            return []
        self.done, self.failed = True, info
        frames = [] if self._errored else [self._event("error", error=error_event_error(info))]
        return [*frames, self._failed_event(info)]

    def upstream_failed(self, sse: SSEEvent, info: ErrorInfo) -> list[bytes]:
        if sse.event not in ("error", "response.failed"):
            return self.fail(info)  # a malformed upstream event: say so in the protocol's words
        self._errored = sse.event == "error"  # `response.failed` should follow it
        self.done = sse.event == "response.failed"
        return [event_frame(sse)]

    def _failed_event(self, info: ErrorInfo) -> bytes:
        announced = self.watch.response or {"id": new_id("resp"), "object": "response", "output": []}
        response = {**announced, "status": "failed", "error": {"code": failure_code(info), "message": info.message}}
        return self._event("response.failed", response=response)

    def _event(self, kind: str, **fields: Any) -> bytes:
        """An event of the proxy's own, numbered on from the upstream's."""
        last = self.watch.last_sequence
        sequence = (-1 if last is None else last) + 1 + self._relayed_after_error
        self._relayed_after_error += 1
        return named_frame(kind, {"type": kind, "sequence_number": sequence, **fields})
