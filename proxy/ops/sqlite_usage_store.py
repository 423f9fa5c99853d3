"""The usage store in the `state_path` SQLite file (the default): the `UsageStore` methods of
proxy/ops/usage_store.py over tables shared by the host's workers.

Owns the two tables' use — `usage_minutes`, one row per minute and dimensions, added to with
`ON CONFLICT DO UPDATE`; `recent_requests`, capped at `RECENT_CAP` — and what happens while the
file cannot be written (disk full, read-only, an I/O error; proxy/state/sqlite.py says which): a
batch is rolled back whole and kept in the worker's `UsageBuffer` (bounded; what overflows is
counted and logged), the file's health goes degraded, and the buffer is written with the next
batch the health lets through — or by the writer's retry on the keeper's tick — once the disk
takes writes again. The tables themselves are created by the migrations (proxy/state/schema.py).

Writes go through one connection kept open (a batch per transaction; the caller writes one batch
at a time, proxy/ops/usage_writer.py); each query opens its own, so it reads one consistent
snapshot while writers go on. SQLite calls block: callers run them on a real thread (`blocking`),
except `try_add`, which never waits. Pure of Flask, requests and gevent.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import fields
from operator import attrgetter
from typing import Any

from proxy.ops.usage_buffer import Batch, UsageBuffer
from proxy.ops.usage_store import (
    BUCKETS,
    COUNTERS,
    DIMENSIONS,
    RECENT_CAP,
    TIMINGS,
    RecentEntry,
    UsageAnswer,
    UsageQuery,
    UsageRow,
    merged,
)
from proxy.state.sqlite import StateFile, begin

log = logging.getLogger("proxy.usage")

_ADD = (f"INSERT INTO usage_minutes (minute, {', '.join(DIMENSIONS)}, {', '.join((*COUNTERS, *TIMINGS))}) "
        f"VALUES ({', '.join('?' * (1 + len(DIMENSIONS) + len(COUNTERS) + len(TIMINGS)))}) "
        f"ON CONFLICT (minute, {', '.join(DIMENSIONS)}) DO UPDATE SET "
        + ", ".join(f"{name} = {name} + excluded.{name}" for name in (*COUNTERS, *TIMINGS)))
_RECENT_FIELDS = tuple(f.name for f in fields(RecentEntry))
_recent_values = attrgetter(*_RECENT_FIELDS)
_ADD_RECENT = (f"INSERT INTO recent_requests ({', '.join(_RECENT_FIELDS)}) "
               f"VALUES ({', '.join('?' * len(_RECENT_FIELDS))})")


class SQLiteUsageStore:
    blocking = True

    def __init__(self, state_file: StateFile) -> None:
        self.file = state_file
        self.health = state_file.health
        self.buffer = UsageBuffer()
        self._writer = state_file.connect()
        # For try_add, on the caller's greenlet: it never waits for another process's write lock
        # (busy timeout 0: busy at once), and leaves checkpoints — which sync the file — to the
        # writer connection above, whose calls run on a thread.
        self._at_once = state_file.connect(busy_timeout=0)
        self._at_once.execute("PRAGMA wal_autocheckpoint=0")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self.file.session() as db:
            db.execute("BEGIN")  # one snapshot for every statement of the query
            yield db
            db.execute("COMMIT")

    def add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry], purge_before: int | None = None) -> None:
        """Buffer, then write everything buffered if the file's health lets a write through now."""
        self.buffer.put(usage, recent, purge_before)
        if not self.buffer.pending() or not self.health.may_try():
            return
        batch = self.buffer.take()
        assert batch is not None
        try:
            begin(self._writer)
            self._write(self._writer, batch)
        except Exception as exc:
            self.buffer.put_back(batch, in_doubt=False)  # rolled back: nothing of it was written
            if not self.file.report(exc):
                log.warning("usage: could not write %d usage rows to the state file (%s: %s); kept to write "
                            "with the next batch", len(batch.rows), type(exc).__name__, exc)
            return
        self.health.ok()

    def try_add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry]) -> bool:
        if self.buffer.pending() or not self.health.up:  # what is kept goes first, and on the thread
            return False
        try:
            self._at_once.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:  # another process is writing: the caller takes the thread
            return False
        self._write(self._at_once, Batch(0, list(usage), list(recent)))  # raises: the caller takes the thread
        return True

    @staticmethod
    def _write(db: sqlite3.Connection, batch: Batch) -> None:
        """The batch in the transaction the caller began: committed, or rolled back and raised."""
        try:
            db.executemany(_ADD, [row.values() for row in merged(batch.rows)])  # a bool is stored as 0 / 1
            if batch.recent:
                db.executemany(_ADD_RECENT, [_recent_values(entry) for entry in batch.recent])
                db.execute("DELETE FROM recent_requests WHERE id <= (SELECT MAX(id) FROM recent_requests) - ?",
                           (RECENT_CAP,))
            if batch.purge_before is not None:
                db.execute("DELETE FROM usage_minutes WHERE minute < ?", (batch.purge_before,))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise

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
