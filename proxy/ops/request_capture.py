"""What the request log copies of one request while it is served: its `Capture` (proxy.ops.records).

Owns the copies, in the request's own greenlet: the client's request as it arrived, each attempt's
request as sent and the upstream's answer as read (a stream's raw bytes, chunk by chunk, with the
time each came), what the client was sent (a stream's frames, write by write, with their times),
and each attempt's end (status, failure class, action, elapsed time). A copy only keeps references
to bytes the request already has, up to `max_body_bytes` of each body and its full size besides:
the per-chunk calls are on a stream's hot path.

Knows when the request is over — its record closed (`done`, from the hook) and its answer out
(`client_answer`, from the edge: for a stream, before it flows; for anything else, after the record
closed) — and then hands itself to whoever it was given (`submit`) exactly once. Builds nothing and
stores nothing: the entry is made off the request path (proxy.ops.request_entry).
Must not import Flask, requests or gevent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from proxy.ops.records import Arrival, AttemptRecord, AttemptStart, RequestRecord


class BodyCopy:
    """One body as it passed: its pieces up to the cap, its full size, and — for a stream — when
    each piece came (seconds since the request arrived) and where it ends in the kept bytes, one
    after the other in one flat list."""

    __slots__ = ("cap", "content_type", "kept", "pieces", "size", "times")

    def __init__(self, cap: int, content_type: str = "application/json") -> None:
        self.cap = cap
        self.content_type = content_type
        self.pieces: list[bytes] = []
        self.kept = 0
        self.size = 0
        self.times: list[float] | None = None

    def whole(self, data: bytes) -> None:
        self.size = len(data)
        self.pieces = [data]
        self.kept = len(data)

    def piece(self, data: bytes, at: float) -> None:
        self.size += len(data)
        if self.kept < self.cap:
            self.pieces.append(data)
            self.kept += len(data)
            times = self.times
            if times is None:
                times = self.times = []
            times += (at, self.kept)  # flat: time, end, time, end, … (packed as is: proxy.ops.request_entry)

    def data(self) -> bytes:
        joined = self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)
        return joined[:self.cap]


class AttemptCopy:
    __slots__ = ("action", "elapsed_s", "klass", "number", "request", "response", "start", "started_s", "status")

    def __init__(self, number: int, start: AttemptStart | None, started_s: float, cap: int) -> None:
        self.number, self.start, self.started_s = number, start, started_s
        self.request = BodyCopy(cap)
        self.response = BodyCopy(cap, "")
        self.status: int | None = None
        self.klass: str | None = None
        self.action: str | None = None
        self.elapsed_s: float | None = None


class RequestCapture:
    """The request log's tap on one request (see the module's docstring)."""

    __slots__ = (
        "answered",
        "arrival",
        "attempts",
        "cap",
        "client",
        "client_headers",
        "client_status",
        "logged_because",
        "origin",
        "record",
        "request_body",
        "sampled",
        "submit",
        "submitted",
    )

    def __init__(self, arrival: Arrival, cap: int, sampled: bool, origin: float,
                 submit: Callable[[RequestCapture], None]) -> None:
        self.arrival = arrival
        self.cap = cap
        self.sampled = sampled  # False: kept only if it fails (errors: always)
        self.origin = origin  # the request's arrival, monotonic: the times of pieces are from it
        self.submit = submit
        self.attempts: list[AttemptCopy] = []
        self.client = BodyCopy(cap, "")
        self.client_status: int | None = None
        self.client_headers: dict[str, str] = {}
        self.request_body = b""  # the client's body, read from the arrival while the request is handled
        self.record: RequestRecord | None = None
        self.answered = False
        self.submitted = False
        self.logged_because = "sampled"

    # ------------------------------------------------------------ from the relay and the engine

    def attempt_started(self, start: AttemptStart) -> None:
        copy = AttemptCopy(start.number, start, time.monotonic() - self.origin, self.cap)
        copy.request.whole(start.body)
        self.attempts.append(copy)

    def upstream_answer(self, status: int, raw: bytes) -> None:
        if self.attempts:
            self.attempts[-1].response.whole(raw)

    def upstream_chunk(self, data: bytes) -> None:
        if self.attempts:
            self.attempts[-1].response.piece(data, time.monotonic() - self.origin)

    def client_frames(self, frames: list[bytes]) -> None:
        at = time.monotonic() - self.origin
        copy = self.client
        for frame in frames:
            copy.piece(frame, at)

    def attempt_ended(self, told: AttemptRecord) -> None:
        copy = next((a for a in reversed(self.attempts) if a.number == told.number), None)
        if copy is None:  # it failed before its request was sent (no start was told)
            copy = AttemptCopy(told.number, None, time.monotonic() - self.origin - told.elapsed_s, self.cap)
            self.attempts.append(copy)
        copy.status, copy.klass, copy.action, copy.elapsed_s = told.status, told.klass, told.action, told.elapsed_s

    # ------------------------------------------------------------ the end

    def client_answer(self, status: int, headers: Mapping[str, str], body: bytes | None) -> None:
        self.request_body = self.arrival.body()  # still in the request's context here, never after
        self.client_status = status
        self.client_headers = dict(headers)
        self.client.content_type = self.client_headers.get("Content-Type", "")
        if body is not None:
            self.client.whole(body)
        self.answered = True
        self._maybe_submit()

    def done(self, record: RequestRecord) -> None:
        self.record = record
        self._maybe_submit()

    def _maybe_submit(self) -> None:
        if self.submitted or self.record is None or not self.answered:
            return
        self.submitted = True
        failed = self.record.status >= 400 or self.record.outcome != "ok"
        if self.sampled or failed:
            self.logged_because = "sampled" if self.sampled else "error"
            self.submit(self)
