"""Same-protocol path for streams: a Responses client in front of a Responses upstream.

Owns relaying the upstream's events byte for byte — event types and fields the proxy does not
know included — while watching them, through the Responses stream decoder, for what the relay
loop needs: usage, whether the response finished, and whether (and how) it failed. Only when the
upstream breaks off before `response.completed` / `incomplete` / `failed` does the proxy add
events of its own: `error`, then `response.failed` carrying the response object the upstream
announced, numbered on from the upstream's last `sequence_number` — what Codex and the SDKs need
to stop waiting.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.events import Failure, Finish, Start, UsageUpdate
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.chat_completions.errors import error_body
from proxy.protocols.responses.response import failure_code, new_id
from proxy.protocols.responses.stream_decode import ResponsesStreamDecoder
from proxy.sse import SSEEvent, event_frame, loads, named_after_type, named_frame

TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


class ResponsesPassthroughStream:
    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.failed: ErrorInfo | None = None
        self.done = False
        self._watch = ResponsesStreamDecoder()
        self._response: dict[str, Any] | None = None  # the response object the upstream announced
        self._next_seq = 0
        self._errored = False  # the upstream sent `error`; its `response.failed` is still to come

    def feed(self, sse: SSEEvent) -> list[bytes]:
        if self.done:
            return []
        sse = named_after_type(sse)
        self._note(sse)
        if self._errored:  # after the upstream's `error`, relay what follows until its terminal event
            self.done = sse.event in TERMINAL_EVENTS
            return [event_frame(sse)]
        for ev in self._watch.feed(sse):
            if isinstance(ev, Start | UsageUpdate) and ev.usage is not None:
                self.usage = self.usage or Usage()
                self.usage.merge(ev.usage)
            elif isinstance(ev, Failure):
                self.failed = ev.error
                if sse.event not in ("error", "response.failed"):
                    return self.fail(ev.error)  # a malformed upstream event: say so in the protocol's words
                self._errored = sse.event == "error"  # `response.failed` should follow it
                self.done = sse.event == "response.failed"
                return [event_frame(sse)]
            elif isinstance(ev, Finish):
                self.done = True
        return [event_frame(sse)]

    def close(self) -> list[bytes]:
        if self.done:
            return []
        if self._errored:  # the upstream said `error` but never `response.failed`
            self.done = True
            return [self._failed_event(self.failed or ErrorInfo("upstream_error", "upstream failed", 502))]
        for ev in self._watch.close():
            if isinstance(ev, Failure):
                return self.fail(ev.error)
        return []

    def keepalive(self) -> list[bytes]:
        # Codex's idle timer counts events, not comments (see the Responses stream encoder).
        if self._response is None:
            return []
        return [self._event("response.in_progress", response={**self._response, "status": "in_progress"})]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.done:
            return []
        self.done, self.failed = True, info
        error = {"type": error_body(info)["error"]["type"], "code": failure_code(info), "message": info.message,
                 "param": None}
        frames = [] if self._errored else [self._event("error", error=error)]
        return [*frames, self._failed_event(info)]

    def _failed_event(self, info: ErrorInfo) -> bytes:
        response = {**(self._response or {"id": new_id("resp"), "object": "response", "output": []}),
                    "status": "failed", "error": {"code": failure_code(info), "message": info.message}}
        return self._event("response.failed", response=response)

    def _note(self, sse: SSEEvent) -> None:
        """Remember the response object and the sequence number, for events the proxy may add."""
        try:
            payload = loads(sse.data)
        except ValueError:
            return
        if not isinstance(payload, dict):
            return
        if isinstance(payload.get("sequence_number"), int):
            self._next_seq = payload["sequence_number"] + 1
        if isinstance(payload.get("response"), dict):
            self._response = payload["response"]

    def _event(self, kind: str, **fields: Any) -> bytes:
        frame = named_frame(kind, {"type": kind, "sequence_number": self._next_seq, **fields})
        self._next_seq += 1
        return frame
