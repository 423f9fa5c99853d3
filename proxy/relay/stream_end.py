"""What an attempt's stream does when it ends, held by the stream for its whole life.

Owns the two callbacks an attempt hands the streaming engine with a stream (`UpstreamAnswer.stream`):
`keep`, the end-of-stream callback (`on_end`) — the finished response object to the request's
conversation state, in the stream's own greenlet before its last frames go out — and `close`, the
outcome callback (`on_close`) — the lease released with the stream's usage and failure, the
stream's end logged, the loop told (`StreamEnded`).

Why an object and not two closures in `Attempt._stream`: every open stream holds its callbacks
until it closes, and an idle stream is mostly what it holds. Two closures cost two function
objects, their cell tuples and a cell per captured name — about 0.6 KiB of each open stream
(bench/deterministic.py) — where one slotted object and two bound methods cost a third of that.

Must not decide anything about the attempt (the attempt's), nor write the request's record (the
loop's, behind `StreamEnded`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from proxy.ir.response import Usage
from proxy.pool.pool import Lease
from proxy.protocols.exchange import Exchange
from proxy.protocols.transcode import StreamRelay
from proxy.routing import Route
from proxy.streaming import StreamOutcome

log = logging.getLogger("proxy.relay")  # the attempt's logger: the stream's end line is unchanged

# Told when a stream an attempt handed to the engine closes: its usage, how it failed (None: ok), and
# what the answer said of itself (the relay's `answer`: its id, model, finish reason; None if it kept none).
StreamEnded = Callable[[Usage | None, str | None, Any], None]


class StreamEnd:
    """The end of one attempt's stream: `keep` when it finished, `close` when it closed."""

    __slots__ = ("clock", "ended", "ex", "lease", "passthrough", "relay", "route", "started")

    def __init__(self, ex: Exchange, route: Route, lease: Lease, relay: StreamRelay, passthrough: bool,
                 clock: Callable[[], float], started: float, ended: StreamEnded | None) -> None:
        self.ex, self.route, self.lease, self.relay, self.passthrough = ex, route, lease, relay, passthrough
        self.clock, self.started = clock, started  # for the elapsed time the end line says
        self.ended = ended  # the loop's, to close the request's record

    @property
    def keeps(self) -> bool:
        """The request has a conversation to keep the answer in: without one, `keep` has nothing to
        do, and the stream is given no end-of-stream callback at all."""
        return self.ex.conversation is not None

    def keep(self) -> None:
        """The stream has finished; its last frames are not out yet, and waiting is allowed here."""
        conversation, final = self.ex.conversation, self.relay.final
        if conversation is not None and final is not None:
            conversation.keep(final, self.route.upstream, self.lease.account.id, self.passthrough)

    def close(self, outcome: StreamOutcome) -> None:
        failure = "client_gone" if outcome.client_gone else (outcome.error.kind if outcome.error else None)
        self.lease.release(failure=failure, usage=outcome.usage,
                           error=outcome.error.message if outcome.error and not outcome.client_gone else None)
        end = "client disconnected" if outcome.client_gone else ("in-band error" if outcome.error else "ok")
        log.info("stream end rid=%s upstream=%s account=%s frames=%d result=%s elapsed_ms=%d%s",
                 self.ex.request_id, self.route.upstream.name, self.lease.account.id, outcome.frames, end,
                 (self.clock() - self.started) * 1000, dropped_note(self.relay.dropped))
        if self.ended is not None:
            self.ended(outcome.usage, failure, getattr(self.relay, "answer", None))


def dropped_note(dropped: Mapping[str, int]) -> str:
    """What the client's encoder left out for this client, for the log line (" dropped=reasoning:2")."""
    if not dropped:
        return ""
    return " dropped=" + ",".join(f"{what}:{n}" for what, n in sorted(dropped.items()))
