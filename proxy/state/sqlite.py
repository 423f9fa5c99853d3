"""Connections to the `state_path` SQLite file for the stores that keep tables of their own in it
(client key limits, conversation affinity).

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


def prepare(path: str, schema: str) -> None:
    """Create the file (owner-only) if it is missing, switch it to WAL and create `schema`'s tables."""
    if not os.path.exists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    with session(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(schema)


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
