"""Where the request log keeps its entries: the `RequestLogStore` interface, in memory and in a
SQLite file of its own beside the state file.

Owns the bounds. An `add` drops what is older than `retention_hours` (in the file, at most once a
minute per writer), then, while the entries kept take more than `max_total_mb`, the oldest — counted
in `dropped`, which the admin API and `/metrics` show. The log is apart from usage: its own file
(`<state_path>` with `.requests.db` for `.db`; one row a request, its parts packed in one blob —
not compressed: zlib's fastest level cost more CPU than the rest of a request's entry,
bench/request_log_overhead.py), its
own connection and lock, so a burst of large bodies never slows the usage commits
a request's answer waits for. The file's schema is this module's alone (`user_version` 1): nothing
else opens it. `state_path: null` keeps the log in the worker's memory, the same bounds.
Redis' store is proxy/ops/redis_request_log.py.
Must not import Flask, requests or gevent.
"""

from __future__ import annotations

import json
import sqlite3
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from proxy.config.request_log import log_path
from proxy.ops.request_entry import LoggedRequest

__all__ = ["MemoryRequestLog", "RequestLogStore", "SQLiteRequestLog", "log_path"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS request_log (
  request_id TEXT PRIMARY KEY, time REAL NOT NULL, client_key TEXT NOT NULL, model TEXT NOT NULL,
  status INTEGER NOT NULL, size INTEGER NOT NULL, meta BLOB NOT NULL, parts BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS request_log_time ON request_log (time);
CREATE TABLE IF NOT EXISTS request_log_totals (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO request_log_totals VALUES ('size', 0), ('dropped', 0);
"""
PURGE_EVERY = 60.0  # seconds between two looks for entries past retention, per writer (at most)


def pack(parts: dict[str, bytes]) -> bytes:
    """A request's parts as one blob (one row a request: a write is one INSERT): for each part its
    name's length and its data's length (4 bytes each, big-endian), the name, the data."""
    out = bytearray()
    for name, data in parts.items():
        encoded = name.encode()
        out += struct.pack(">II", len(encoded), len(data)) + encoded + data
    return bytes(out)


def unpack(blob: bytes) -> dict[str, bytes]:
    parts, at = {}, 0
    while at < len(blob):
        name_len, data_len = struct.unpack_from(">II", blob, at)
        at += 8
        name = blob[at:at + name_len].decode()
        at += name_len
        parts[name] = blob[at:at + data_len]
        at += data_len
    return parts


class RequestLogStore(Protocol):
    blocking: bool  # True: calls wait on a disk or the network (run off the request path, on a thread)

    def add(self, entries: Sequence[LoggedRequest], now: float) -> int:
        """Keep `entries`; drop what is past retention or over the size bound, oldest first.
        Returns how many were dropped for the size bound by this call."""

    def get(self, request_id: str) -> LoggedRequest | None: ...

    def having(self, request_ids: Sequence[str]) -> set[str]:
        """Which of these requests the log has."""

    def between(self, since: float, until: float) -> Iterator[LoggedRequest]:
        """Every entry that arrived in [since, until), oldest first (the export)."""

    def totals(self) -> dict[str, int]:
        """{"entries", "bytes", "dropped"}."""


class MemoryRequestLog:
    """The log in this worker's memory (`state_path: null`), with the same bounds."""

    blocking = False

    def __init__(self, retention_s: float, max_bytes: int, clock: Callable[[], float] = time.time) -> None:
        self.retention_s, self.max_bytes, self.clock = retention_s, max_bytes, clock
        self.entries: OrderedDict[str, tuple[LoggedRequest, int]] = OrderedDict()  # oldest first
        self.bytes = 0
        self.dropped = 0

    def add(self, entries: Sequence[LoggedRequest], now: float) -> int:
        for entry in entries:
            size = entry.size
            self.entries[entry.request_id] = (entry, size)
            self.bytes += size
        while self.entries:
            oldest, size = next(iter(self.entries.values()))
            if oldest.time >= now - self.retention_s:
                break
            del self.entries[oldest.request_id]
            self.bytes -= size
        dropped = 0
        while self.bytes > self.max_bytes and self.entries:
            _, (_, size) = self.entries.popitem(last=False)
            self.bytes -= size
            dropped += 1
        self.dropped += dropped
        return dropped

    def get(self, request_id: str) -> LoggedRequest | None:
        found = self.entries.get(request_id)
        return found[0] if found and found[0].time >= self.clock() - self.retention_s else None

    def having(self, request_ids: Sequence[str]) -> set[str]:
        return {i for i in request_ids if self.get(i) is not None}

    def between(self, since: float, until: float) -> Iterator[LoggedRequest]:
        since = max(since, self.clock() - self.retention_s)
        for entry, _ in sorted(self.entries.values(), key=lambda e: e[0].time):
            if since <= entry.time < until:
                yield entry

    def totals(self) -> dict[str, int]:
        return {"entries": len(self.entries), "bytes": self.bytes, "dropped": self.dropped}


class SQLiteRequestLog:
    """The log in its own SQLite file, shared by the host's workers (WAL: readers never wait)."""

    blocking = True

    def __init__(self, path: str, retention_s: float, max_bytes: int, clock: Callable[[], float] = time.time) -> None:
        self.path, self.retention_s, self.max_bytes, self.clock = path, retention_s, max_bytes, clock
        # Past retention is looked for at most once a minute — more often when retention is short.
        self.purge_every = min(PURGE_EVERY, retention_s / 4)
        self._local = threading.local()  # one connection per thread: the writer's and the readers'
        self._next_purge = 0.0
        with self._connection() as db:
            db.executescript(SCHEMA)
            db.execute("PRAGMA user_version = 1")

    def _connection(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def add(self, entries: Sequence[LoggedRequest], now: float) -> int:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            added = 0
            for entry in entries:
                # A client may send the same x-request-id twice: the later request replaces the earlier.
                replaced = db.execute("DELETE FROM request_log WHERE request_id = ? RETURNING size",
                                      (entry.request_id,)).fetchone()
                meta, parts = entry.meta_json(), pack(entry.parts)
                size = len(meta) + len(parts)  # what it takes on disk: the bound counts that
                db.execute("INSERT INTO request_log VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           (entry.request_id, entry.time, entry.client_key, entry.model, entry.status, size,
                            meta, parts))
                added += size - (replaced[0] if replaced is not None else 0)
            if now >= self._next_purge:
                self._next_purge = now + self.purge_every
                added -= self._delete(db, "time < ?", (now - self.retention_s,))
            total = db.execute("UPDATE request_log_totals SET value = value + ? WHERE name = 'size' RETURNING value",
                               (added,)).fetchone()[0]
            dropped = 0
            if total > self.max_bytes:
                # The oldest first, up to the first whose removal brings the total under the bound.
                cut, over = None, total - self.max_bytes
                for time_, size in db.execute("SELECT time, size FROM request_log ORDER BY time"):
                    over -= size
                    dropped += 1
                    if over <= 0:
                        cut = time_
                        break
                if cut is not None:
                    removed = self._delete(db, "time <= ?", (cut,))
                    db.execute("UPDATE request_log_totals SET value = value - ? WHERE name = 'size'", (removed,))
                    db.execute("UPDATE request_log_totals SET value = value + ? WHERE name = 'dropped'", (dropped,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return dropped

    @staticmethod
    def _delete(db: sqlite3.Connection, where: str, args: tuple[float]) -> int:
        """Delete the entries `where` says; the bytes they held."""
        return sum(size for (size,) in db.execute(f"DELETE FROM request_log WHERE {where} RETURNING size", args))

    def get(self, request_id: str) -> LoggedRequest | None:
        # What is past retention but not purged yet is not served (purges are at most once a minute).
        row = self._connection().execute("SELECT request_id, time, client_key, model, status, meta, parts "
                                          "FROM request_log WHERE request_id = ? AND time >= ?",
                                          (request_id, self.clock() - self.retention_s)).fetchone()
        return None if row is None else _entry(row)

    def having(self, request_ids: Sequence[str]) -> set[str]:
        db = self._connection()
        found: set[str] = set()
        for i in range(0, len(request_ids), 500):
            chunk = list(request_ids[i:i + 500])
            marks = ",".join("?" * len(chunk))
            found.update(r[0] for r in db.execute(f"SELECT request_id FROM request_log WHERE request_id IN ({marks}) "
                                                  "AND time >= ?", [*chunk, self.clock() - self.retention_s]))
        return found

    def between(self, since: float, until: float) -> Iterator[LoggedRequest]:
        rows = self._connection().execute("SELECT request_id, time, client_key, model, status, meta, parts "
                                          "FROM request_log WHERE time >= ? AND time < ? ORDER BY time",
                                          (max(since, self.clock() - self.retention_s), until))
        for row in rows:
            yield _entry(row)

    def totals(self) -> dict[str, int]:
        db = self._connection()
        values = dict(db.execute("SELECT name, value FROM request_log_totals"))
        count = db.execute("SELECT COUNT(*) FROM request_log").fetchone()[0]
        return {"entries": count, "bytes": values.get("size", 0), "dropped": values.get("dropped", 0)}


def _entry(row: tuple[str, float, str, str, int, bytes, bytes]) -> LoggedRequest:
    request_id, time, client_key, model, status, meta, parts = row
    return LoggedRequest(request_id, time, client_key, model, status, json.loads(meta), unpack(parts))
