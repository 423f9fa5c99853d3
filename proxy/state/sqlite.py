"""Connections to the `state_path` SQLite file for the stores that keep tables of their own in it
(the pool's account states, client key limits, conversation affinity).

Owns how such a store opens the file: created readable by its owner only (the pool keeps
runtime-added accounts' keys in it), WAL mode, a connection per operation (cheap, and free of the
thread that runs it — callers run these blocking calls on a pool thread), and a write transaction
that takes the write lock first (`BEGIN IMMEDIATE`), so that what it reads is what it acts on,
whichever worker process writes at the same time. Pure of Flask, requests and gevent.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator


def prepare(path: str, schema: str) -> sqlite3.Connection:
    """Create the file (owner-only) if it is missing, switch it to WAL and create `schema`'s tables.
    Returns a connection for the store to keep open and never use: while one stays open, closing
    an operation's connection does not checkpoint and delete the WAL, so the next commit does not
    recreate it — a WAL created afresh costs a sync of the disk, and a checkpoint on the last close
    another (milliseconds per operation, measured by bench/limits_overhead.py)."""
    if not os.path.exists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    with session(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(schema)
    keep = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    keep.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the file and its WAL
    return keep


@contextlib.contextmanager
def session(path: str) -> Iterator[sqlite3.Connection]:
    """A connection for one operation, in autocommit mode."""
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable across a crash of the process, not of the OS
    try:
        yield db
    finally:
        db.close()


@contextlib.contextmanager
def write_transaction(path: str) -> Iterator[sqlite3.Connection]:
    """One transaction holding the write lock from its first statement: committed if the block
    ends normally, rolled back otherwise."""
    with session(path) as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
