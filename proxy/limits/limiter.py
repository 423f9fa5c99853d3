"""The request's side of per-key limits: let a request in or answer 429, and charge it when it ends.

Owns, for a key with `limits:` — `admit` when the request arrives (after its key and model are
checked): its tokens estimated from its input (proxy.ir.tokens, the estimate count_tokens gives),
every limit checked and the request reserved against them in one atomic step of the store, or a
429 in the client's protocol with `Retry-After` and a message naming the key and the limit; then,
as a hook, `request_done` when it ends — whole answer, error, or stream closed — replacing the
reservation with the tokens the upstream reported (input, cached included, plus output; the
estimate stands for an answered request whose usage never came; nothing for one that failed) and
ending its max_concurrent lease. Nothing here ever cuts a stream: limits apply when requests start.
While requests run, their leases are renewed every LEASE_TTL / 3 seconds, so those of a worker
that died are free LEASE_TTL seconds after its last renewal.

Which store: a chain (proxy/state/fallback.py) — Redis with `state: {backend: redis}` (every
host), then the `state_path` SQLite file (every worker of the host), then the worker's memory. A
store that fails is skipped for a few seconds, with one warning per outage: limits then hold per
host, or per worker. What a request took on a store standing in for the first is owed to the first
(`_owed`) and replayed onto it once it answers again (rules.still_owed: a minute bucket's part
drained by the time since, a day's or month's only within its window), so the counters are whole
after an outage or a Redis failover; a reservation made on the first whose settling failed owes
the difference the same way. A reservation is settled where it was made.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import gevent

from proxy.config.keys import ClientKey
from proxy.config.limits import KeyLimits
from proxy.errors import ProxyError
from proxy.ir.request import Request
from proxy.ir.tokens import estimate_input_tokens
from proxy.limits import rules
from proxy.limits.store import LEASE_TTL, Decision, LimitStore, MemoryLimitStore
from proxy.ops.hooks import Hooks
from proxy.ops.records import RequestRecord
from proxy.state.fallback import Fallback, Reach, reaches
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
    admitted_at: float  # wall clock


@dataclass
class _Owed:
    """Charges the first store of the chain has not seen yet, for one key."""

    limits: KeyLimits
    charges: list[tuple[dict[str, float], float]]  # (limit name → amount, when it was taken)


class Limiter(Hooks):
    def __init__(self, chain: Sequence[Reach[LimitStore]], clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._stores = Fallback(chain, call_store, log=log, clock=clock)
        self._open: dict[int, _Held] = {}  # by id() of the request's record, alive while it is held here
        self._renewer: gevent.Greenlet | None = None
        self._owed: dict[str, _Owed] = {}  # key name → what the first store is owed
        self._in_doubt: list[tuple[str, KeyLimits, dict[str, float], str]] = []  # sent, answer lost: send again
        self._replaying = False

    @classmethod
    def over(cls, local: LimitStore | None, shared: LimitStore | None = None) -> Limiter:
        """The chain for a worker: `shared` (Redis), `local` (the state file), then memory."""
        return cls(reaches(shared, local, MemoryLimitStore(), "client key limits are enforced"))

    @property
    def first(self) -> LimitStore:
        return self._stores.first

    # ------------------------------------------------------------ the request's start

    def admit(self, entry: ClientKey | None, record: RequestRecord, request: Callable[[], Request],
              body: dict[str, Any], tokens: int | None = None) -> None:
        """Let the request in (reserving it) or raise the 429. `request` decodes the body to the IR,
        called only when the key has token limits (for the estimate) and `tokens` does not give it
        (an embeddings request, estimated by its own rule)."""
        if entry is None or entry.limits is None:
            return
        limits = entry.limits
        tokens = (estimate(request, body) if tokens is None else tokens) if limits.counts_tokens else 0
        lease = uuid.uuid4().hex
        store, decision = self._call(lambda s: s.admit(entry.name, limits, tokens, lease))
        if decision.refusal is not None:
            refusal = decision.refusal
            raise ProxyError(429, rules.message(entry.name, refusal), "rate_limit", code="rate_limit_exceeded",
                             headers={"Retry-After": str(refusal.retry_after)})
        self._open[id(record)] = _Held(record, store, entry.name, limits, lease, decision, tokens, time.time())
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
            first_owed = not self._owed and not self._in_doubt
            if store is self.first:  # its reservation stands there: owe it the difference
                self._owe(held.key, held.limits, {name: tokens - amount for name, amount in decision.reserved.items()})
            if first_owed:  # once per outage, not once per request
                log.warning("limits: could not charge a request to the key %r (%s: %s); what requests take is "
                            "owed to the store until it answers", held.key, type(exc).__name__, exc)
            return
        if store is not self.first:  # let in by a store standing in: the first is owed all of it
            taken = {name: float(tokens) for name in rules.TOKEN_LIMITS}
            self._owe(held.key, held.limits, {**taken, "requests_per_minute": 1.0}, held.admitted_at)

    # ------------------------------------------------------------ operators' view

    def status(self, entry: ClientKey) -> dict[str, dict[str, float]] | None:
        if entry.limits is None:
            return None
        limits = entry.limits
        return self._call(lambda s: s.status(entry.name, limits))[1]

    # ------------------------------------------------------------ which store

    def _call(self, op: Callable[[LimitStore], T]) -> tuple[LimitStore, T]:
        store, result = self._stores.call(op)
        if store is self.first and (self._owed or self._in_doubt) and not self._replaying:
            self._replaying = True  # one replay at a time; it runs beside the request that found the store back
            gevent.spawn(self.replay)
        return store, result

    # ------------------------------------------------------------ what the first store is owed

    def _owe(self, key: str, limits: KeyLimits, amounts: dict[str, float], at: float | None = None) -> None:
        owed = self._owed.setdefault(key, _Owed(limits, []))
        owed.limits = limits
        owed.charges.append((amounts, time.time() if at is None else at))

    def owed(self) -> int:
        """Charges waiting for the first store (for tests and the log)."""
        return sum(len(o.charges) for o in self._owed.values()) + len(self._in_doubt)

    def replay(self) -> None:
        """Send the first store what it is owed, one charge per key, each drained to now. A charge
        whose answer is lost is sent again, under the same token, until the store answers."""
        try:
            now = time.time()
            for key, owed in list(self._owed.items()):
                amounts: dict[str, float] = {}
                for charge, at in owed.charges:
                    for name, amount in rules.still_owed(owed.limits, charge, at, now).items():
                        amounts[name] = amounts.get(name, 0.0) + amount
                del self._owed[key]
                if amounts:
                    self._in_doubt.append((key, owed.limits, amounts, uuid.uuid4().hex))
            first = self.first
            while self._in_doubt:
                key, limits, amounts, token = self._in_doubt[0]
                try:
                    call_store(first, functools.partial(first.charge, key, limits, amounts, token))
                except Exception as exc:
                    log.warning("limits: could not replay what the key %r took meanwhile (%s: %s); trying again "
                                "when the store answers", key, type(exc).__name__, exc)
                    return
                self._in_doubt.pop(0)
                log.info("limits: replayed what the key %r took while its store was away", key)
        finally:
            self._replaying = False

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
