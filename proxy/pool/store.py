"""Where pool state lives between requests, workers and restarts: a small store interface, with an
SQLite implementation (the default, at `state_path`) and an in-memory one.

Owns persistence and sharing, not decisions. Each worker keeps its pools in memory and, once a
second, hands the store what changed (account states, counter deltas) and asks what other workers
changed since the version it last saw — so an account taken out of rotation in one worker is out
in all of them within about two seconds. The store also grants a renewable leader lease, so that
probes and balance refreshes run once per host rather than once per worker, and it keeps accounts
added or removed at runtime through the admin API (their keys included — the file is created
readable by its owner only). Outbound proxies' states travel the same way, in their own table,
known by a digest of their URL (never the URL, which may hold credentials).

Calls block (SQLite); the pool's sync greenlet runs them on a real thread, never a request.
The Redis store (proxy/pool/redis_store.py, several hosts) implements the same methods.
Pure of Flask and requests.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.state import sqlite
from proxy.state.sqlite import unwritable


@dataclass
class AccountRecord:
    """One account as stored: its state (versioned) and its counters (summed over workers)."""

    upstream: str
    id: str
    status: str = "active"
    until: float | None = None
    reason: str | None = None
    since: float | None = None
    balance: float | None = None
    requests: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    last_used: float = 0.0
    runtime: dict[str, Any] | None = None  # an account added through the admin API: its config, key included
    removed: bool = False  # removed through the admin API
    version: int = 0


@dataclass
class CounterDelta:
    upstream: str
    id: str
    requests: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    last_used: float = 0.0


@dataclass
class ProxyRecord:
    """One outbound proxy of one upstream's pool, as stored (versioned like account states)."""

    upstream: str
    id: str  # proxy_id(url): a digest, so the URL's credentials never reach the file
    status: str = "ok"
    until: float | None = None
    reason: str | None = None
    since: float | None = None
    failures: int = 0
    version: int = 0


STATE_FIELDS = ("status", "until", "reason", "since", "balance", "runtime", "removed")


class PendingWrites:
    """Pool changes a store has not written yet (its backend away, or the state file unwritable):
    the newest state per account and per proxy, counter deltas summed — so what waits grows with
    the number of accounts, not with the traffic. Callers hold their own lock."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, str], AccountRecord] = {}
        self.deltas: dict[tuple[str, str], CounterDelta] = {}
        self.proxies: dict[tuple[str, str], ProxyRecord] = {}

    def __bool__(self) -> bool:
        return bool(self.states or self.deltas or self.proxies)

    def add(self, states: Sequence[AccountRecord], deltas: Sequence[CounterDelta],
            proxies: Sequence[ProxyRecord]) -> None:
        for record in states:
            self.states[(record.upstream, record.id)] = record
        for delta in deltas:
            kept = self.deltas.get((delta.upstream, delta.id))
            if kept is None:
                self.deltas[(delta.upstream, delta.id)] = CounterDelta(**{**delta.__dict__,
                                                                           "failures": dict(delta.failures)})
            else:
                _add(kept, delta)
        for proxy in proxies:
            self.proxies[(proxy.upstream, proxy.id)] = proxy

    def take(self) -> PendingWrites:
        """Everything pending, as a batch of its own; this one is left empty."""
        taken = PendingWrites()
        taken.states, taken.deltas, taken.proxies = self.states, self.deltas, self.proxies
        self.states, self.deltas, self.proxies = {}, {}, {}
        return taken

    def put_back(self, batch: PendingWrites) -> None:
        """A batch that was not written, under anything newer that came meanwhile."""
        self.states = {**batch.states, **self.states}
        self.proxies = {**batch.proxies, **self.proxies}
        for k, delta in self.deltas.items():
            if k in batch.deltas:
                _add(batch.deltas[k], delta)
            else:
                batch.deltas[k] = delta
        self.deltas = batch.deltas


class StateStore(Protocol):
    def load(self) -> list[AccountRecord]: ...
    def write(self, states: list[AccountRecord], deltas: list[CounterDelta],
              proxies: Sequence[ProxyRecord] = ()) -> None: ...
    def changes_since(self, version: int) -> tuple[list[AccountRecord], int]: ...
    def proxy_changes_since(self, version: int) -> tuple[list[ProxyRecord], int]: ...
    def counters(self) -> list[AccountRecord]: ...
    def lead(self, holder: str, ttl: float) -> bool: ...


class MemoryStore:
    """For `state_path: null`: nothing survives a restart and nothing is shared between workers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, str], AccountRecord] = {}
        self._proxies: dict[tuple[str, str], ProxyRecord] = {}
        self._version = 0
        self._leader: tuple[str, float] | None = None

    def load(self) -> list[AccountRecord]:
        with self._lock:
            return [_copy(r) for r in self._rows.values()]

    def write(self, states: list[AccountRecord], deltas: list[CounterDelta],
              proxies: Sequence[ProxyRecord] = ()) -> None:
        with self._lock:
            for proxy in proxies:
                self._version += 1
                self._proxies[(proxy.upstream, proxy.id)] = ProxyRecord(**{**proxy.__dict__, "version": self._version})
            for state in states:
                self._version += 1
                row = self._rows.setdefault((state.upstream, state.id), AccountRecord(state.upstream, state.id))
                for name in STATE_FIELDS:
                    setattr(row, name, getattr(state, name))
                row.version = self._version
            for delta in deltas:
                row = self._rows.setdefault((delta.upstream, delta.id), AccountRecord(delta.upstream, delta.id))
                _add(row, delta)

    def changes_since(self, version: int) -> tuple[list[AccountRecord], int]:
        with self._lock:
            rows = [_copy(r) for r in self._rows.values() if r.version > version]
        return rows, max((r.version for r in rows), default=version)

    def proxy_changes_since(self, version: int) -> tuple[list[ProxyRecord], int]:
        with self._lock:
            rows = [ProxyRecord(**r.__dict__) for r in self._proxies.values() if r.version > version]
        return rows, max((r.version for r in rows), default=version)

    def counters(self) -> list[AccountRecord]:
        return self.load()

    def lead(self, holder: str, ttl: float) -> bool:
        with self._lock:
            now = time.time()
            if self._leader is None or self._leader[0] == holder or self._leader[1] < now:
                self._leader = (holder, now + ttl)
                return True
            return False


class SQLiteStore:
    """One file per host, shared by its workers (proxy/state/sqlite.py opens it); every write one
    transaction. While the file cannot be written (disk full, read-only), changes wait in memory
    (`PendingWrites`) and the file's health says degraded; each worker goes on with what it knows,
    and the changes are written once a write gets through again."""

    def __init__(self, state_file: sqlite.StateFile) -> None:
        self.file = state_file
        self.path = state_file.path
        self.health = state_file.health
        self._lock = threading.Lock()
        self._pending = PendingWrites()

    @contextlib.contextmanager
    def _session(self) -> Iterator[sqlite3.Connection]:
        """A connection for one operation (cheap, and free of the thread that opened it)."""
        with self.file.session() as db:
            db.row_factory = sqlite3.Row
            yield db

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self.file.write_transaction() as db:
            db.row_factory = sqlite3.Row
            yield db

    def load(self) -> list[AccountRecord]:
        with self._session() as db:
            return [_record(row) for row in db.execute("SELECT * FROM accounts")]

    def write(self, states: list[AccountRecord], deltas: list[CounterDelta],
              proxies: Sequence[ProxyRecord] = ()) -> None:
        with self._lock:
            self._pending.add(states, deltas, proxies)
            if not self._pending or not self.health.may_try():
                return
            batch = self._pending.take()
        try:
            self._write(batch)
        except Exception as exc:
            with self._lock:
                self._pending.put_back(batch)
            if unwritable(exc) is None:  # locked for longer than the busy timeout, …: the keeper logs it
                raise

    def _write(self, batch: PendingWrites) -> None:
        with self._transaction() as db:
            version = _meta(db, "version", 0)
            for proxy in batch.proxies.values():
                version += 1
                db.execute("INSERT OR REPLACE INTO proxies (upstream, id, status, until, reason, since, failures, "
                           "version) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           (proxy.upstream, proxy.id, proxy.status, proxy.until, proxy.reason, proxy.since,
                            proxy.failures, version))
            for state in batch.states.values():
                version += 1
                db.execute("INSERT OR IGNORE INTO accounts (upstream, id) VALUES (?, ?)", (state.upstream, state.id))
                db.execute(
                    "UPDATE accounts SET status=?, until=?, reason=?, since=?, balance=?, "
                    "runtime=?, removed=?, version=? WHERE upstream=? AND id=?",
                    (state.status, state.until, state.reason, state.since, state.balance,
                     json.dumps(state.runtime) if state.runtime is not None else None, int(state.removed), version,
                     state.upstream, state.id))
            for delta in batch.deltas.values():
                db.execute("INSERT OR IGNORE INTO accounts (upstream, id) VALUES (?, ?)", (delta.upstream, delta.id))
                row = db.execute("SELECT failures FROM accounts WHERE upstream=? AND id=?",
                                 (delta.upstream, delta.id)).fetchone()
                failures = json.loads(row["failures"] or "{}")
                for klass, count in delta.failures.items():
                    failures[klass] = failures.get(klass, 0) + count
                db.execute(
                    "UPDATE accounts SET requests=requests+?, tokens_in=tokens_in+?, tokens_out=tokens_out+?, "
                    "failures=?, last_used=MAX(last_used, ?) WHERE upstream=? AND id=?",
                    (delta.requests, delta.tokens_in, delta.tokens_out, json.dumps(failures), delta.last_used,
                     delta.upstream, delta.id))
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('version', ?)", (version,))

    def changes_since(self, version: int) -> tuple[list[AccountRecord], int]:
        """Rows written after `version`, and the version to ask from next time. That is the newest
        version among the rows read — not the store's current version, which a write committing
        between two reads could have advanced past rows this read did not see."""
        with self._session() as db:
            rows = [_record(r) for r in db.execute("SELECT * FROM accounts WHERE version > ?", (version,))]
        return rows, max((r.version for r in rows), default=version)

    def proxy_changes_since(self, version: int) -> tuple[list[ProxyRecord], int]:
        """Like `changes_since`, for the proxies' table (the same version sequence)."""
        with self._session() as db:
            rows = [ProxyRecord(upstream=r["upstream"], id=r["id"], status=r["status"], until=r["until"],
                                reason=r["reason"], since=r["since"], failures=r["failures"], version=r["version"])
                    for r in db.execute("SELECT * FROM proxies WHERE version > ?", (version,))]
        return rows, max((r.version for r in rows), default=version)

    def counters(self) -> list[AccountRecord]:
        return self.load()

    def lead(self, holder: str, ttl: float) -> bool:
        """Take or renew the leader lease; True while `holder` has it. False while the file cannot
        be written: nobody leads, so probes wait, as with a Redis that is away."""
        if not self.health.may_try():
            return False
        try:
            with self._transaction() as db:
                now = time.time()
                current = _meta(db, "leader", None)
                mine = current is None or current.split("|")[0] == holder or float(current.split("|")[1]) < now
                if mine:
                    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('leader', ?)",
                               (f"{holder}|{now + ttl}",))
                return bool(mine)
        except Exception as exc:
            if unwritable(exc) is None:
                raise
            return False


def _meta(db: sqlite3.Connection, key: str, default: Any) -> Any:
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row["value"] if row is not None else default


def _record(row: sqlite3.Row) -> AccountRecord:
    return AccountRecord(
        upstream=row["upstream"], id=row["id"], status=row["status"], until=row["until"], reason=row["reason"],
        since=row["since"], balance=row["balance"],
        requests=row["requests"], failures=json.loads(row["failures"] or "{}"), tokens_in=row["tokens_in"],
        tokens_out=row["tokens_out"], last_used=row["last_used"],
        runtime=json.loads(row["runtime"]) if row["runtime"] else None, removed=bool(row["removed"]),
        version=row["version"])


def _copy(record: AccountRecord) -> AccountRecord:
    return AccountRecord(**{**record.__dict__, "failures": dict(record.failures)})


def _add(row: AccountRecord | CounterDelta, delta: CounterDelta) -> None:
    row.requests += delta.requests
    row.tokens_in += delta.tokens_in
    row.tokens_out += delta.tokens_out
    row.last_used = max(row.last_used, delta.last_used)
    for klass, count in delta.failures.items():
        row.failures[klass] = row.failures.get(klass, 0) + count
