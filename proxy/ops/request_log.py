"""The request log: which requests are kept with their bodies (`RequestLog`, a hook) and how they
reach the store without holding anyone up (`RequestLogWriter`).

Owns the choice and the hand-off. When a completion request arrives, `RequestLog` chooses it if its
key's name matches a `request_log.keys` glob, and samples it (`sample`); a chosen request outside
the sample is still watched when `errors: always`, and kept only if it fails. A watched request gets
a `RequestCapture` (proxy.ops.request_capture) on its record, which the attempt, the streaming
engine and the edge feed; when the request is over the capture comes to the writer.
The writer is off the request path: a capture is queued (a list append; beyond `QUEUE_CAP` waiting
it is dropped and counted), and one writer greenlet per worker — after gathering for up to
`GATHER` seconds, so requests finishing together share a transaction — makes the entries (copies
joined, truncated, scrubbed and redacted: proxy.ops.request_entry) and adds them to the store in
batches — on a real thread for the SQLite file, on its greenlet for Redis. A stream's client has
its last frame before any of that runs. A store that fails loses that batch (counted, logged once
until it works again): the log is for looking, never for holding requests up.
`keys`, `sample`, `errors`, `max_body_bytes` and `redact` follow a reload; whether the log is on and
its bounds are read at start.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from fnmatch import fnmatchcase

import gevent
from gevent.event import Event

from proxy.config.request_log import RequestLogConfig
from proxy.ops.hooks import Hooks
from proxy.ops.records import Arrival, AttemptRecord, RequestRecord
from proxy.ops.request_capture import RequestCapture
from proxy.ops.request_entry import LoggedRequest, Redactor, logged_request
from proxy.ops.request_log_store import RequestLogStore
from proxy.upstream.keeper import blocking

log = logging.getLogger("proxy.request_log")

QUEUE_CAP = 1000  # captures waiting for the writer; more are dropped (and counted) rather than held in memory
BATCH = 64  # entries written in one transaction / one script
# How long the writer gathers captures before it writes, unless a batch is full or a reader waits:
# a transaction costs about as much as the entries in it (bench/request_log_overhead.py), so ten
# requests finishing within it share one.
GATHER = 0.5


class RequestLogWriter:
    def __init__(self, store: RequestLogStore, redactor: Callable[[], Redactor],
                 clock: Callable[[], float] = time.time) -> None:
        self.store, self.redactor, self.clock = store, redactor, clock
        self.pending: list[RequestCapture] = []
        self.dropped_queue = 0  # captures dropped because the writer was behind
        self.dropped_bound = 0  # entries this worker's writes pushed out of the size bound
        self.failed = 0  # entries lost to a store that failed
        self.written = 0
        self._failing = False
        self._wake = Event()
        self._hurry = Event()  # set: write now (a batch is full, or someone reads the log)
        self._idle = Event()
        self._idle.set()
        self._greenlet: gevent.Greenlet | None = None
        # Told of every drop, with its reason (size_bound, queue, store): the Prometheus counter.
        self.on_drop: Callable[[str, int], None] = lambda reason, count: None

    def put(self, capture: RequestCapture) -> None:
        if len(self.pending) >= QUEUE_CAP:
            self.dropped_queue += 1
            self.on_drop("queue", 1)
            return
        self.pending.append(capture)
        self._idle.clear()
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self._run)
        self._wake.set()
        if len(self.pending) >= BATCH:
            self._hurry.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Until everything queued so far is written (the admin API reads after it; tests too)."""
        self._hurry.set()
        return self._idle.wait(timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self._hurry.wait(GATHER)
            self._hurry.clear()
            while self.pending:
                batch, self.pending = self.pending[:BATCH], self.pending[BATCH:]
                self._write(batch)
            self._idle.set()

    def _write(self, batch: list[RequestCapture]) -> None:
        try:
            dropped = blocking(self._build_and_add, batch) if not getattr(self.store, "cooperative", False) \
                else self._build_and_add(batch)
        except Exception as exc:
            self.failed += len(batch)
            self.on_drop("store", len(batch))
            if not self._failing:
                self._failing = True
                log.warning("request log: the store failed to keep %d request(s) (%s: %s); requests go on, and "
                            "what cannot be written is dropped until it works again", len(batch),
                            type(exc).__name__, exc)
            return
        if self._failing:
            self._failing = False
            log.info("request log: the store writes again")
        self.dropped_bound += dropped
        if dropped:
            self.on_drop("size_bound", dropped)
        self.written += len(batch)

    def _build_and_add(self, batch: list[RequestCapture]) -> int:
        redactor = self.redactor()
        entries: list[LoggedRequest] = []
        for capture in batch:
            try:
                entries.append(logged_request(capture, redactor))
            except Exception:
                log.exception("request log: making the entry of a request failed")
        return self.store.add(entries, self.clock()) if entries else 0


class RequestLog(Hooks):
    """The hook that chooses requests and hands their captures to the writer."""

    def __init__(self, settings: Callable[[], RequestLogConfig], writer: RequestLogWriter,
                 chance: Callable[[], float] = random.random) -> None:
        self.settings, self.writer, self.chance = settings, writer, chance

    def request_arrived(self, record: RequestRecord, arrival: Arrival) -> None:
        config = self.settings()
        if not config.enabled or not any(fnmatchcase(record.client_key, glob) for glob in config.keys):
            return
        sampled = config.sample >= 1.0 or self.chance() < config.sample
        if not sampled and config.errors != "always":
            return
        record.capture = RequestCapture(arrival, config.max_body_bytes, sampled, record.started_mono, self.writer.put)

    def attempt(self, record: AttemptRecord) -> None:
        request = record.request
        if request is not None and isinstance(request.capture, RequestCapture):
            request.capture.attempt_ended(record)

    def request_done(self, record: RequestRecord) -> None:
        if isinstance(record.capture, RequestCapture):
            record.capture.done(record)


def redactor_for(settings: Callable[[], RequestLogConfig],
                 secrets: Callable[[], tuple[str, ...]]) -> Callable[[], Redactor]:
    """The redactor of the config in force, made again only when a reload changed the config."""
    made: dict[str, tuple[object, Redactor]] = {}

    def current() -> Redactor:
        config, known = settings(), secrets()
        held = made.get("r")
        if held is None or held[0] != (config.redact, known):
            held = made["r"] = ((config.redact, known), Redactor(config.redact, known))
        return held[1]

    return current
