"""Where usage figures and the recent-requests list live: the `UsageStore` interface, an SQLite
implementation (tables of its own in the `state_path` file, shared by the host's workers) and an
in-memory one (`state_path: null`: one worker, forgotten on restart).

Owns persistence and aggregation, not what a request counts as (proxy/ops/usage.py decides that).
Usage is kept per minute: one row per (minute, client key, client protocol, model, upstream model,
upstream, account, stream, outcome, status) with its counters, added to by every request — so the
table grows with the variety of traffic, not its volume. The recent-requests list is a table capped
at `RECENT_CAP` rows. `add` writes a batch of both in one transaction; a query reads one snapshot,
so its rows always add up to its totals. A networked store (Redis, a database) implements the same
four methods.

SQLite calls block: callers run them on a real thread (`blocking` is True), never on a request's
greenlet. Pure of Flask, requests and gevent.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, Protocol

RECENT_CAP = 1000  # the recent-requests list keeps this many; /admin/requests shows up to this many
BUCKETS = {"minute": 60, "hour": 3600, "day": 86400}  # UTC: epoch-aligned hours and days are UTC's
DIMENSIONS = ("client_key", "client_protocol", "model", "upstream_model", "upstream", "account", "stream",
              "outcome", "status")
COUNTERS = ("requests", "errors", "input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens",
            "reasoning_tokens")
TIMINGS = ("first_byte_ms_sum", "first_byte_count", "duration_ms_sum")  # averages are computed from these


@dataclass(slots=True)
class UsageRow:
    """One minute's figures for one combination of dimensions ('' where a dimension is unknown)."""

    minute: int  # epoch seconds of the minute's start (UTC)
    client_key: str
    client_protocol: str
    model: str
    upstream_model: str
    upstream: str
    account: str
    stream: bool
    outcome: str
    status: int
    requests: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    first_byte_ms_sum: int = 0
    first_byte_count: int = 0
    duration_ms_sum: int = 0

    def key(self) -> tuple[Any, ...]:
        return (self.minute, self.client_key, self.client_protocol, self.model, self.upstream_model, self.upstream,
                self.account, self.stream, self.outcome, self.status)

    def values(self) -> tuple[Any, ...]:
        """Every field, in order (`dataclasses.astuple` copies deeply: a measurable cost per request)."""
        return (*self.key(), self.requests, self.errors, self.input_tokens, self.output_tokens, self.cached_tokens,
                self.cache_write_tokens, self.reasoning_tokens, self.first_byte_ms_sum, self.first_byte_count,
                self.duration_ms_sum)

    def add(self, other: UsageRow) -> None:
        for name in (*COUNTERS, *TIMINGS):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class RecentEntry:
    """One finished request as the recent-requests list shows it: no body, no key."""

    request_id: str
    time: float  # when it arrived, epoch seconds
    client_key: str
    client_protocol: str
    model: str
    upstream_model: str | None
    upstream: str | None
    account: str | None
    stream: bool
    status: int
    outcome: str
    attempts: int
    first_byte_ms: int | None
    duration_ms: int | None
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class UsageQuery:
    since: int  # epoch seconds, on a minute boundary; included
    until: int  # epoch seconds, on a minute boundary; excluded
    group_by: tuple[str, ...] = ()  # among DIMENSIONS
    bucket: str | None = None  # among BUCKETS: rows carry the bucket's start as `time`


@dataclass(slots=True)
class UsageAnswer:
    rows: list[dict[str, Any]]  # group values (and `time`: the bucket's start, epoch seconds), counters, timings
    totals: dict[str, Any]  # counters and timings over the whole window


class UsageStore(Protocol):
    blocking: bool  # True when calls block (run them on a thread)

    def add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry], purge_before: int | None = None) -> None:
        """Add to the minute rows, append to the recent list (capped), and drop minutes older than
        `purge_before` — all or nothing."""

    def try_add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry]) -> bool:
        """`add` without a purge, only if it can be done at once without waiting on anyone (another
        process's write, the network): False, with nothing written, otherwise. A blocking store
        offers it so the common case needs no thread; a store that cannot tell returns False. It
        must not yield to other greenlets (the writer counts on the queue not changing under it),
        so a networked store returns False."""

    def query(self, query: UsageQuery) -> UsageAnswer: ...

    def recent(self, limit: int) -> list[RecentEntry]:
        """The last `limit` requests added, newest first."""


def merged(rows: Sequence[UsageRow]) -> list[UsageRow]:
    """Rows with the same minute and dimensions summed into one (a batch usually repeats a few);
    the rows given are left as they were."""
    out: dict[tuple[Any, ...], UsageRow] = {}
    sums: set[int] = set()  # ids of the rows made here, which may be added to
    for row in rows:
        key = row.key()
        kept = out.get(key)
        if kept is None:
            out[key] = row
            continue
        if id(kept) not in sums:
            kept = out[key] = UsageRow(*kept.values())
            sums.add(id(kept))
        kept.add(row)
    return list(out.values())


class MemoryUsageStore:
    """For `state_path: null`: this worker's figures only, gone on restart. Never blocks."""

    blocking = False

    def __init__(self) -> None:
        self._rows: dict[tuple[Any, ...], UsageRow] = {}
        self._recent: deque[RecentEntry] = deque(maxlen=RECENT_CAP)

    def add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry], purge_before: int | None = None) -> None:
        for row in usage:
            kept = self._rows.get(row.key())
            if kept is None:
                self._rows[row.key()] = UsageRow(*row.values())
            else:
                kept.add(row)
        self._recent.extend(recent)
        if purge_before is not None:
            self._rows = {k: r for k, r in self._rows.items() if r.minute >= purge_before}

    def try_add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry]) -> bool:
        self.add(usage, recent)
        return True

    def query(self, query: UsageQuery) -> UsageAnswer:
        width = BUCKETS[query.bucket] if query.bucket else None
        groups: dict[tuple[Any, ...], dict[str, Any]] = {}
        totals = _zero()
        for row in self._rows.values():
            if not query.since <= row.minute < query.until:
                continue
            values = {d: getattr(row, d) for d in query.group_by}
            if width is not None:
                values = {"time": row.minute - row.minute % width, **values}
            group = groups.setdefault(tuple(values.values()), {**values, **_zero()})
            for name in (*COUNTERS, *TIMINGS):
                group[name] += getattr(row, name)
                totals[name] += getattr(row, name)
        return UsageAnswer(rows=[groups[k] for k in sorted(groups)], totals=totals)

    def recent(self, limit: int) -> list[RecentEntry]:
        return list(itertools.islice(reversed(self._recent), limit))


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS usage_minutes (
    minute INTEGER NOT NULL,
    client_key TEXT NOT NULL, client_protocol TEXT NOT NULL, model TEXT NOT NULL, upstream_model TEXT NOT NULL,
    upstream TEXT NOT NULL, account TEXT NOT NULL, stream INTEGER NOT NULL, outcome TEXT NOT NULL,
    status INTEGER NOT NULL,
    {", ".join(f"{name} INTEGER NOT NULL DEFAULT 0" for name in (*COUNTERS, *TIMINGS))},
    PRIMARY KEY (minute, {", ".join(DIMENSIONS)})) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS recent_requests (
    id INTEGER PRIMARY KEY,
    {", ".join(f.name for f in fields(RecentEntry))});
"""
_ADD = (f"INSERT INTO usage_minutes (minute, {', '.join(DIMENSIONS)}, {', '.join((*COUNTERS, *TIMINGS))}) "
        f"VALUES ({', '.join('?' * (1 + len(DIMENSIONS) + len(COUNTERS) + len(TIMINGS)))}) "
        f"ON CONFLICT (minute, {', '.join(DIMENSIONS)}) DO UPDATE SET "
        + ", ".join(f"{name} = {name} + excluded.{name}" for name in (*COUNTERS, *TIMINGS)))
_RECENT_FIELDS = tuple(f.name for f in fields(RecentEntry))
_recent_values = attrgetter(*_RECENT_FIELDS)
_ADD_RECENT = (f"INSERT INTO recent_requests ({', '.join(_RECENT_FIELDS)}) "
               f"VALUES ({', '.join('?' * len(_RECENT_FIELDS))})")


class SQLiteUsageStore:
    """Tables of their own in the pool's state file (WAL mode, as proxy/pool/store.py sets it).
    Writes go through one connection kept open (a batch per transaction; the caller writes one
    batch at a time, proxy/ops/usage_writer.py);
    each query opens its own, so it reads one consistent snapshot while writers go on."""

    blocking = True

    def __init__(self, path: str) -> None:
        self.path = path
        if not os.path.exists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # the pool keeps keys in this file too
        self._writer = self._connect()
        self._writer.execute("PRAGMA journal_mode=WAL")
        self._writer.executescript(_SCHEMA)
        # For try_add, on the caller's greenlet: it never waits for another process's write lock
        # (timeout 0: busy at once), and leaves checkpoints — which sync the file — to the writer
        # connection above, whose calls run on a thread.
        # Its setup waits like any other connection's: another worker starting at the same moment
        # may hold the file (creating its tables, switching it to WAL), and a timeout of 0 here
        # once failed a worker's boot with "database is locked" (two workers, the benchmark).
        self._at_once = self._connect()
        self._at_once.execute("PRAGMA wal_autocheckpoint=0")
        self._at_once.execute("PRAGMA busy_timeout=0")

    def _connect(self) -> sqlite3.Connection:
        # Used from whichever pool thread runs the call, one call at a time: not tied to a thread.
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable across a crash of the process, not of the OS
        return db

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        db = self._connect()
        try:
            db.execute("BEGIN")  # one snapshot for every statement of the query
            yield db
            db.execute("COMMIT")
        finally:
            db.close()

    def add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry], purge_before: int | None = None) -> None:
        if not usage and not recent and purge_before is None:
            return
        self._write(self._writer, usage, recent, purge_before)

    def try_add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry]) -> bool:
        try:
            self._at_once.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:  # another process is writing: the caller takes the thread
            return False
        self._write(self._at_once, usage, recent, None, begun=True)
        return True

    @staticmethod
    def _write(db: sqlite3.Connection, usage: Sequence[UsageRow], recent: Sequence[RecentEntry],
               purge_before: int | None, begun: bool = False) -> None:
        if not begun:
            db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(_ADD, [row.values() for row in merged(usage)])  # a bool is stored as 0 / 1
            if recent:
                db.executemany(_ADD_RECENT, [_recent_values(entry) for entry in recent])
                db.execute("DELETE FROM recent_requests WHERE id <= (SELECT MAX(id) FROM recent_requests) - ?",
                           (RECENT_CAP,))
            if purge_before is not None:
                db.execute("DELETE FROM usage_minutes WHERE minute < ?", (purge_before,))
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def query(self, query: UsageQuery) -> UsageAnswer:
        sums = ", ".join(f"SUM({name})" for name in (*COUNTERS, *TIMINGS))
        columns = list(query.group_by)
        if query.bucket:
            columns.insert(0, f"minute - minute % {BUCKETS[query.bucket]}")
        where = "WHERE minute >= ? AND minute < ?"
        window = (query.since, query.until)
        with self._reading() as db:
            count, *total = db.execute(f"SELECT COUNT(*), {sums} FROM usage_minutes {where}", window).fetchone()
            if columns:
                listed = ", ".join(columns)
                found = db.execute(f"SELECT {listed}, {sums} FROM usage_minutes {where} "
                                   f"GROUP BY {listed} ORDER BY {listed}", window).fetchall()
            else:  # one row for the whole window, if anything happened in it
                found = [tuple(total)] if count else []
        names = (*(["time"] if query.bucket else []), *query.group_by)
        rows = [{**dict(zip(names, _typed(names, row[:len(names)]), strict=True)),
                 **dict(zip((*COUNTERS, *TIMINGS), row[len(names):], strict=True))} for row in found]
        return UsageAnswer(rows=rows, totals=dict(zip((*COUNTERS, *TIMINGS), (v or 0 for v in total), strict=True)))

    def recent(self, limit: int) -> list[RecentEntry]:
        with self._reading() as db:
            found = db.execute(f"SELECT {', '.join(_RECENT_FIELDS)} FROM recent_requests "
                               "ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        entries = [RecentEntry(*row) for row in found]
        for entry in entries:
            entry.stream = bool(entry.stream)  # stored as 0 / 1
        return entries

    def close(self) -> None:
        self._writer.close()
        self._at_once.close()


def _typed(names: Sequence[str], values: Sequence[Any]) -> list[Any]:
    """SQLite keeps booleans as integers: give `stream` back as one."""
    return [bool(v) if name == "stream" else v for name, v in zip(names, values, strict=True)]


def _zero() -> dict[str, Any]:
    return dict.fromkeys((*COUNTERS, *TIMINGS), 0)


def open_usage_store(state_path: str | None) -> UsageStore:
    return SQLiteUsageStore(state_path) if state_path else MemoryUsageStore()
