"""Where per-key limit figures live: the `LimitStore` interface, an in-memory store (`state_path:
null`: one worker) and an SQLite one (tables of its own in the `state_path` file, shared by the
host's workers). The Redis store (several hosts) is proxy/limits/redis_store.py.

Owns keeping the figures and changing them atomically — a check and its reservation in one
transaction (`BEGIN IMMEDIATE`: one writer at a time across processes), so two workers can never
both take the last unit of a budget — not what they mean (proxy/limits/rules.py).

Requests in flight (`max_concurrent`) are leases that expire `LEASE_TTL` seconds after they were
last renewed: the worker holding one renews it while its request runs (proxy/limits/limiter.py), so
a worker or host that dies frees its slots within that time.
SQLite calls block (`blocking` is True): callers run them on a real thread. Pure of Flask,
requests and gevent.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from proxy.config.limits import KeyLimits
from proxy.limits import rules
from proxy.limits.rules import Refusal
from proxy.state import sqlite

LEASE_TTL = 12.0  # seconds a request-in-flight lease lives unless renewed (a dead worker's are free after this)


@dataclass
class Decision:
    """A store's answer to `admit`: refused (with the limit reached), or let in with its reservations."""

    refusal: Refusal | None
    reserved: dict[str, float] = field(default_factory=dict)
    at: float = 0.0  # when the reservation was made, by the store's clock


class LimitStore(Protocol):
    blocking: bool  # True when calls block (run them on a thread)

    def admit(self, key: str, limits: KeyLimits, tokens: int, lease: str) -> Decision:
        """Check every limit and, if all have room, reserve the request (and its lease, if the key
        has max_concurrent) — atomically."""

    def settle(self, key: str, limits: KeyLimits, reserved: Mapping[str, float], tokens: int, lease: str,
               reserved_at: float) -> None:
        """The request ended having used `tokens`: replace its reservation, end its lease."""

    def renew(self, leases: Mapping[str, Sequence[str]]) -> None:
        """Extend these leases (key name → lease ids) by LEASE_TTL from now."""

    def charge(self, key: str, limits: KeyLimits, amounts: Mapping[str, float], token: str) -> None:
        """Add `amounts` (limit name → what to add now, negative to give back) to the key's figures:
        what another store took while this one was away. `token` names the charge, so a networked
        store can apply a charge sent twice once."""

    def status(self, key: str, limits: KeyLimits) -> dict[str, dict[str, float]]:
        """Each limit's figures now (proxy.limits.rules.status)."""


class MemoryLimitStore:
    """`state_path: null`: one worker's figures, forgotten on restart."""

    blocking = False

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._state: dict[str, dict[str, list[float]]] = {}
        self._leases: dict[str, dict[str, float]] = {}

    def _in_flight(self, key: str, now: float) -> dict[str, float]:
        leases = self._leases.setdefault(key, {})
        for lease in [lease for lease, expires in leases.items() if expires <= now]:
            del leases[lease]
        return leases

    def admit(self, key: str, limits: KeyLimits, tokens: int, lease: str) -> Decision:
        with self._lock:
            now = self._clock()
            state = self._state.setdefault(key, {})
            leases = self._in_flight(key, now)
            refusal = rules.check(limits, state, len(leases), tokens, now)
            if refusal is not None:
                return Decision(refusal)
            if limits.max_concurrent is not None:
                leases[lease] = now + LEASE_TTL
            return Decision(None, rules.reserve(limits, state, tokens, now), now)

    def settle(self, key: str, limits: KeyLimits, reserved: Mapping[str, float], tokens: int, lease: str,
               reserved_at: float) -> None:
        with self._lock:
            self._leases.get(key, {}).pop(lease, None)
            rules.settle(limits, self._state.setdefault(key, {}), dict(reserved), tokens, self._clock(), reserved_at)

    def charge(self, key: str, limits: KeyLimits, amounts: Mapping[str, float], token: str) -> None:
        with self._lock:
            rules.charge(limits, self._state.setdefault(key, {}), dict(amounts), self._clock())

    def renew(self, leases: Mapping[str, Sequence[str]]) -> None:
        with self._lock:
            now = self._clock()
            for key, ids in leases.items():
                held = self._leases.get(key, {})
                for lease in ids:
                    if lease in held:
                        held[lease] = now + LEASE_TTL

    def status(self, key: str, limits: KeyLimits) -> dict[str, dict[str, float]]:
        with self._lock:
            now = self._clock()
            return rules.status(limits, self._state.get(key, {}), len(self._in_flight(key, now)), now)


class SQLiteLimitStore:
    """The host's workers share the `state_path` file; each call is one transaction on a connection
    of its own (cheap, and free of the thread that runs it)."""

    blocking = True

    def __init__(self, state_file: sqlite.StateFile, clock: Callable[[], float] = time.time) -> None:
        self.file = state_file
        self._clock = clock

    def _session(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self.file.session()

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self.file.write_transaction()

    @staticmethod
    def _read(db: sqlite3.Connection, key: str) -> dict[str, list[float]]:
        return {name: [used, stamp] for name, used, stamp in
                db.execute("SELECT name, used, stamp FROM key_limit_usage WHERE key=?", (key,))}

    @staticmethod
    def _write(db: sqlite3.Connection, key: str, state: dict[str, list[float]]) -> None:
        db.executemany("INSERT OR REPLACE INTO key_limit_usage (key, name, used, stamp) VALUES (?, ?, ?, ?)",
                       [(key, name, used, stamp) for name, (used, stamp) in state.items()])

    @staticmethod
    def _in_flight(db: sqlite3.Connection, key: str, now: float) -> int:
        db.execute("DELETE FROM key_limit_leases WHERE key=? AND expires<=?", (key, now))
        return int(db.execute("SELECT COUNT(*) FROM key_limit_leases WHERE key=?", (key,)).fetchone()[0])

    def admit(self, key: str, limits: KeyLimits, tokens: int, lease: str) -> Decision:
        with self._transaction() as db:
            now = self._clock()
            state = self._read(db, key)
            in_flight = self._in_flight(db, key, now) if limits.max_concurrent is not None else 0
            refusal = rules.check(limits, state, in_flight, tokens, now)
            if refusal is not None:
                return Decision(refusal)
            reserved = rules.reserve(limits, state, tokens, now)
            self._write(db, key, state)
            if limits.max_concurrent is not None:
                db.execute("INSERT OR REPLACE INTO key_limit_leases (key, lease, expires) VALUES (?, ?, ?)",
                           (key, lease, now + LEASE_TTL))
            return Decision(None, reserved, now)

    def settle(self, key: str, limits: KeyLimits, reserved: Mapping[str, float], tokens: int, lease: str,
               reserved_at: float) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM key_limit_leases WHERE key=? AND lease=?", (key, lease))
            if limits.counts_tokens:
                state = self._read(db, key)
                rules.settle(limits, state, dict(reserved), tokens, self._clock(), reserved_at)
                self._write(db, key, state)

    def charge(self, key: str, limits: KeyLimits, amounts: Mapping[str, float], token: str) -> None:
        with self._transaction() as db:
            state = self._read(db, key)
            rules.charge(limits, state, dict(amounts), self._clock())
            self._write(db, key, state)

    def renew(self, leases: Mapping[str, Sequence[str]]) -> None:
        with self._transaction() as db:
            expires = self._clock() + LEASE_TTL
            db.executemany("UPDATE key_limit_leases SET expires=? WHERE key=? AND lease=?",
                           [(expires, key, lease) for key, ids in leases.items() for lease in ids])

    def status(self, key: str, limits: KeyLimits) -> dict[str, dict[str, float]]:
        with self._session() as db:
            now = self._clock()
            state = self._read(db, key)
            in_flight = int(db.execute("SELECT COUNT(*) FROM key_limit_leases WHERE key=? AND expires>?",
                                       (key, now)).fetchone()[0])
        return rules.status(limits, state, in_flight, now)
