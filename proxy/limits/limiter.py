"""The request's side of per-key limits: let a request in or answer 429, and charge it when it ends.

Owns, for a key with `limits:` — `admit` when the request arrives (after its key and model are
checked): its tokens estimated from its input (proxy.ir.tokens, the estimate count_tokens gives),
every limit checked and the request reserved against them in one atomic step of the store, or a
429 in the client's protocol with `Retry-After` and a message naming the key and the limit; then,
as a hook, `request_done` when it ends — whole answer, error, or stream closed — replacing the
reservation with the tokens the upstream reported (input, cached included, plus output; the
estimate stands for an answered request whose usage never came; nothing for one that failed) and
ending its max_concurrent lease. Nothing here ever cuts a stream: limits apply when requests start.
While requests run, their leases are renewed every LEASE_TTL / 3 seconds.

Which store: Redis with `state: {backend: redis}` (every host), else the `state_path` SQLite file
(every worker of the host), else memory. When Redis fails, the host's own store takes over — limits
then hold per host, not across hosts — with one warning per outage; Redis is tried again after
RETRY_SHARED seconds (proxy/state/shared_first.py), and its return is logged. A reservation is
settled where it was made.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import gevent

from proxy.config import Config
from proxy.config.keys import ClientKey
from proxy.config.limits import KeyLimits
from proxy.errors import ProxyError
from proxy.ir.request import Request
from proxy.ir.tokens import estimate_input_tokens
from proxy.limits import rules
from proxy.limits.store import LEASE_TTL, Decision, LimitStore, MemoryLimitStore, SQLiteLimitStore
from proxy.ops.hooks import Hooks
from proxy.ops.records import RequestRecord
from proxy.state.shared_first import SharedFirst
from proxy.upstream.keeper import blocking, call_store

log = logging.getLogger("proxy.limits")

T = TypeVar("T")


@dataclass
class _Held:
    """A request let in: what it reserved, where, and its lease."""

    record: RequestRecord
    store: LimitStore
    key: str
    limits: KeyLimits
    lease: str
    decision: Decision
    estimate: int


class Limiter(Hooks):
    def __init__(self, local: LimitStore, shared: LimitStore | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.local = local
        self.shared = shared
        self.clock = clock
        self._stores = SharedFirst(local, shared, call_store, log=log, clock=clock,
                                   meanwhile="client key limits are enforced per host")
        self._open: dict[int, _Held] = {}  # by id() of the request's record, alive while it is held here
        self._renewer: gevent.Greenlet | None = None

    @classmethod
    def open(cls, config: Config) -> Limiter:
        local: LimitStore = SQLiteLimitStore(config.state_path) if config.state_path else MemoryLimitStore()
        shared: LimitStore | None = None
        if config.state.backend == "redis":
            from proxy.limits.redis_store import RedisLimitStore  # imports redis: only when configured

            shared = RedisLimitStore(config.state)
        return cls(local, shared)

    # ------------------------------------------------------------ the request's start

    def admit(self, entry: ClientKey | None, record: RequestRecord, request: Callable[[], Request],
              body: dict[str, Any]) -> None:
        """Let the request in (reserving it) or raise the 429. `request` decodes the body to the IR,
        called only when the key has token limits (for the estimate)."""
        if entry is None or entry.limits is None:
            return
        limits = entry.limits
        tokens = estimate(request, body) if limits.counts_tokens else 0
        lease = uuid.uuid4().hex
        store, decision = self._call(lambda s: s.admit(entry.name, limits, tokens, lease))
        if decision.refusal is not None:
            refusal = decision.refusal
            raise ProxyError(429, rules.message(entry.name, refusal), "rate_limit", code="rate_limit_exceeded",
                             headers={"Retry-After": str(refusal.retry_after)})
        self._open[id(record)] = _Held(record, store, entry.name, limits, lease, decision, tokens)
        if limits.max_concurrent is not None:
            self._start_renewer()

    # ------------------------------------------------------------ the request's end (a hook)

    def request_done(self, record: RequestRecord) -> None:
        held = self._open.pop(id(record), None)
        if held is None or held.record is not record:
            return
        usage = record.usage
        if usage is not None and (usage.input_tokens or usage.output_tokens):
            tokens = usage.input_tokens + usage.output_tokens
        elif record.status and record.status < 400:
            tokens = held.estimate  # answered, but the upstream never said what it cost
        else:
            tokens = 0
        store, decision = held.store, held.decision
        try:
            call_store(store, lambda: store.settle(held.key, held.limits, decision.reserved, tokens, held.lease,
                                                  decision.at))
        except Exception as exc:
            log.warning("limits: could not charge %d tokens to the key %r (%s: %s); its reservation stands",
                        tokens, held.key, type(exc).__name__, exc)

    # ------------------------------------------------------------ operators' view

    def status(self, entry: ClientKey) -> dict[str, dict[str, float]] | None:
        if entry.limits is None:
            return None
        limits = entry.limits
        return self._call(lambda s: s.status(entry.name, limits))[1]

    # ------------------------------------------------------------ which store

    def _call(self, op: Callable[[LimitStore], T]) -> tuple[LimitStore, T]:
        return self._stores.call(op)

    # ------------------------------------------------------------ leases of requests in flight

    def _start_renewer(self) -> None:
        if self._renewer is None or self._renewer.dead:
            self._renewer = gevent.spawn(self._renew_forever)

    def _renew_forever(self) -> None:
        while self._open:
            gevent.sleep(LEASE_TTL / 3)
            self.renew()

    def renew(self) -> None:
        """Extend the leases of the requests still running here."""
        by_store: dict[int, tuple[LimitStore, dict[str, list[str]]]] = {}
        for held in list(self._open.values()):
            if held.limits.max_concurrent is not None:
                entry = by_store.setdefault(id(held.store), (held.store, {}))
                entry[1].setdefault(held.key, []).append(held.lease)
        for store, leases in by_store.values():
            try:
                if store.blocking:
                    blocking(store.renew, leases)
                else:
                    store.renew(leases)
            except Exception as exc:
                log.warning("limits: could not renew %d request leases (%s: %s)",
                            sum(map(len, leases.values())), type(exc).__name__, exc)


def estimate(request: Callable[[], Request], body: dict[str, Any]) -> int:
    """The request's input tokens as the proxy estimates them (the reservation)."""
    try:
        return estimate_input_tokens(request())
    except Exception:  # a body its decoder cannot take: its size is still a fair guess
        return len(json.dumps(body, separators=(",", ":"))) // 4
