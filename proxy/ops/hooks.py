"""The hooks the core calls, and the set that fans each call out to every concern.

Owns the plug-in point for cross-cutting concerns: usage accounting, metrics and the
recent-requests list each subclass `Hooks` and override what they need. The relay and the edge
call the `HookSet` — never a concern by name — and a concern that fails is logged and skipped:
accounting must never break a client's answer.
Must not import Flask, requests or gevent.
"""

from __future__ import annotations

import logging

from proxy.ops.records import Arrival, AttemptRecord, RequestRecord

log = logging.getLogger(__name__)


class Hooks:
    """One concern. Every method is called on the request's own greenlet: keep them cheap."""

    def request_arrived(self, record: RequestRecord, arrival: Arrival) -> None:
        """A completion request arrived (its model not read yet): a concern that watches a request
        from its start sets its tap on the record here (`capture`, `trace`)."""

    def attempt(self, record: AttemptRecord) -> None:
        """An attempt ended (answered, failed, or handed its stream to the engine)."""

    def stream_opened(self, record: RequestRecord) -> None:
        """A stream began to flow to its client."""

    def stream_closed(self, record: RequestRecord) -> None:
        """That stream ended, however it ended (always paired with stream_opened)."""

    def request_done(self, record: RequestRecord) -> None:
        """The request ended: answered, refused, failed or abandoned by its client. Once per request."""


class HookSet(Hooks):
    def __init__(self, hooks: list[Hooks] | None = None) -> None:
        self.hooks: list[Hooks] = []
        # Whether any concern watches requests from their arrival: when none does (the request log
        # and tracing off), the edge builds no `Arrival` at all.
        self.watch_arrivals = False
        for hook in hooks or []:
            self.add(hook)

    def add(self, hook: Hooks) -> None:
        self.hooks.append(hook)
        if type(hook).request_arrived is not Hooks.request_arrived:
            self.watch_arrivals = True

    def request_arrived(self, record: RequestRecord, arrival: Arrival) -> None:
        for hook in self.hooks:
            try:
                hook.request_arrived(record, arrival)
            except Exception:
                log.exception("hook %s failed on an arriving request", type(hook).__name__)

    def attempt(self, record: AttemptRecord) -> None:
        for hook in self.hooks:
            try:
                hook.attempt(record)
            except Exception:
                log.exception("hook %s failed on an attempt", type(hook).__name__)

    def stream_opened(self, record: RequestRecord) -> None:
        for hook in self.hooks:
            try:
                hook.stream_opened(record)
            except Exception:
                log.exception("hook %s failed on a stream opening", type(hook).__name__)

    def stream_closed(self, record: RequestRecord) -> None:
        for hook in self.hooks:
            try:
                hook.stream_closed(record)
            except Exception:
                log.exception("hook %s failed on a stream closing", type(hook).__name__)

    def finish(self, record: RequestRecord, status: int, outcome: str) -> None:
        """Close `record` with its status and outcome and tell the hooks — unless it was closed
        already (a request ends once: a stream's record is closed when the stream ends)."""
        if record.finish(status, outcome):
            self.request_done(record)

    def request_done(self, record: RequestRecord) -> None:
        for hook in self.hooks:
            try:
                hook.request_done(record)
            except Exception:
                log.exception("hook %s failed on a finished request", type(hook).__name__)
