"""The `state_path` SQLite file as a worker uses it: the one way every store with tables in it
(the pool's account states, usage, client key limits, conversation affinity) opens it.

Owns opening — `StateFile.open` checks that the file is at the schema version this code knows
(proxy/state/schema.py; gunicorn's master migrated it before forking, and a worker never runs DDL
or `PRAGMA journal_mode`) — and connections: one per operation (free of the thread that runs it:
callers run these blocking calls on a pool thread; ~0.5 ms to open, so a store read on every
request keeps its own between operations instead, as the affinity store does), plus one kept open and idle for
the worker's life, so closing an operation's connection never checkpoints and deletes the WAL and
the next commit does not recreate it (a WAL created afresh costs a sync of the disk, a checkpoint
on the last close another: milliseconds per operation, bench/limits_overhead.py). A write
transaction takes the write lock first (`BEGIN IMMEDIATE`), so that what it reads is what it acts
on, whichever worker process writes at the same time; "database is locked" is waited out for up to
`BUSY_TIMEOUT` seconds (SQLite's own busy handler, and a retry where SQLite answers busy at once).

And owns what a failed write means for the file's health: disk full, read-only, an I/O error
(`unwritable`) mark the store degraded (`StoreHealth`, shown by /readyz and
`llm_proxy_state_store_up{backend="sqlite"}`) until a write gets through again. The stores decide
what to keep meanwhile. Pure of Flask, requests and gevent.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator

from proxy.state.health import StoreHealth
from proxy.state.schema import CURRENT_VERSION, StateFileError, applied_version, is_locked

BUSY_TIMEOUT = 30.0  # seconds an operation waits for another process's write lock
OPEN_WAIT = 60.0  # seconds a worker starting waits for the file to be readable
_RETRY_EVERY = 0.05

# SQLite's primary result codes that mean the file cannot take a write now (sqlite3.h).
_UNWRITABLE = {13: "the state file's disk is full", 8: "the state file is read-only",
               10: "the state file's disk fails (I/O error)", 14: "the state file cannot be opened"}
_ERRNO = {errno.ENOSPC: 13, errno.EDQUOT: 13, errno.EROFS: 8, errno.EIO: 10}


def unwritable(exc: BaseException) -> str | None:
    """Why `exc` says the state file cannot be written now — disk full, read-only, I/O error — or
    None for any other error."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None:
            return _UNWRITABLE.get(code & 0xFF)
        text = str(exc)  # an error raised without a code (older SQLite bindings)
        for needle, primary in (("disk is full", 13), ("readonly", 8), ("disk I/O", 10)):
            if needle in text:
                return _UNWRITABLE[primary]
        return None
    if isinstance(exc, OSError) and exc.errno in _ERRNO:
        return _UNWRITABLE[_ERRNO[exc.errno]]
    return None


class StateFile:
    """One worker's handle on the state file, shared by every store that keeps tables in it."""

    def __init__(self, path: str, health: StoreHealth | None = None) -> None:
        self.path = path
        self.health = health or StoreHealth("sqlite")
        self._keep = self.connect()  # idle for the worker's life: see the module's docstring
        self._keep.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the file and its WAL

    @classmethod
    def open(cls, path: str, health: StoreHealth | None = None, wait: float = OPEN_WAIT,
             migrated_here: bool = False) -> StateFile:
        """The file, once it is known to be at this code's schema version. A lock held by another
        process is waited out for up to `wait` seconds. A file that is not migrated is a
        StateFileError saying what to do — `fatal` unless `migrated_here` (our master migrated it
        before this worker was forked: a file found unmigrated now was replaced under the running
        proxy, and a later worker may find it back); one written by a newer version always is."""
        deadline = time.monotonic() + wait
        while True:
            try:
                db = _connect(path, min(BUSY_TIMEOUT, wait))
                try:
                    version = applied_version(db)
                finally:
                    db.close()
                break
            except sqlite3.OperationalError as exc:
                if not is_locked(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(_RETRY_EVERY)
        if version != CURRENT_VERSION:
            raise StateFileError(fatal=version > CURRENT_VERSION or not migrated_here, message=
                f"{path}: schema version {version}, this llm-proxy uses {CURRENT_VERSION}: "
                + ("run `llm-proxy state migrate --config FILE`, or start the proxy with `llm-proxy serve` or "
                   "`gunicorn -c python:proxy.serving.gunicorn_conf`, whose master prepares the file before "
                   "its workers start" if version < CURRENT_VERSION else
                   "a newer llm-proxy wrote it; upgrade, or point state_path at another file"))
        return cls(path, health)

    def connect(self, busy_timeout: float = BUSY_TIMEOUT) -> sqlite3.Connection:
        """A connection in autocommit mode, usable from whichever thread runs the call (one call at a time)."""
        db = _connect(self.path, busy_timeout)
        db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable across a crash of the process, not of the OS
        return db

    @contextlib.contextmanager
    def session(self) -> Iterator[sqlite3.Connection]:
        """A connection for one operation, in autocommit mode."""
        db = self.connect()
        try:
            yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def write_transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction holding the write lock from its first statement: committed if the block
        ends normally, rolled back otherwise. A write that gets through marks the file healthy; one
        the file cannot take (`unwritable`) marks it degraded, and is raised to the store."""
        with self.session() as db:
            begin(db)
            try:
                yield db
                db.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                self.report(exc)
                raise
        self.health.ok()

    def report(self, exc: BaseException) -> bool:
        """Tell the health signal about a failed write; True if it means the file is unwritable."""
        cause = unwritable(exc)
        if cause is not None:
            self.health.failed(cause)
        return cause is not None

    def close(self) -> None:
        self._keep.close()


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    """A connection to the existing file: never one that creates it (`mode=rw`) — a worker that
    created a missing state file would start an empty, unmigrated one beside the real one's WAL."""
    return sqlite3.connect(f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=rw", uri=True,
                           timeout=busy_timeout, isolation_level=None, check_same_thread=False)


def begin(db: sqlite3.Connection, wait: float = BUSY_TIMEOUT) -> None:
    """`BEGIN IMMEDIATE`, waiting out a lock SQLite reports at once instead of through its busy
    handler (a WAL being recovered by another process)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            db.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(_RETRY_EVERY)
