"""Where budget figures live: the `BudgetStore` interface and its SQLite store (tables of its own in
the `state_path` file, shared by the host's workers; the same code over a private in-memory
database is the store of `state_path: null`, one worker). The Redis store (several hosts) is
proxy/budgets/redis_store.py.

Owns keeping the figures and changing them atomically: per subject, window and period what was
`spent` (`budget_spend`), and the reservations of requests in flight (`budget_holds`, one row per
request and line, with a lease that expires `LEASE_TTL` seconds after it was last renewed).
`admit` checks every line — spent + reserved + this request's amount ≤ limit — and reserves them
all, in one `BEGIN IMMEDIATE` transaction: one writer at a time across the host's processes, so two
workers can never both take the last dollar. `settle` replaces a request's holds with its real
cost. A hold whose lease expired (its worker died, or could not renew it) is charged as spent at
its full amount by the next `admit` of its subject — a budget is never exceeded by a request
nobody settled — and a late `settle` of it charges only the difference (real cost - amount).
SQLite calls block (`blocking` is True): callers run them on a real thread. Pure of Flask,
requests and gevent.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from proxy.budgets.windows import Line, Refusal
from proxy.state import sqlite
from proxy.state.schema import MIGRATIONS

T = TypeVar("T")
LEASE_TTL = 12.0  # seconds a request's hold lives unless renewed (the limiter's leases live as long)

Figures = dict[tuple[str, str], tuple[int, int]]  # (subject, window) → (spent, reserved) in the period asked


class BudgetStore(Protocol):
    blocking: bool  # True when calls block (run them on a thread)

    def admit(self, lines: Sequence[Line], lease: str) -> Refusal | None:
        """Check every line and, if all have room, hold them under `lease` — atomically."""

    def settle(self, lines: Sequence[Line], lease: str, cost: int) -> list[int]:
        """The request ended having cost `cost` micro-dollars: charge it to each line's period and
        drop its holds. Returns what each line's period has spent now (alerts read it)."""

    def renew(self, leases: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Extend these holds (lease, its subjects) by LEASE_TTL from now."""

    def figures(self, wanted: Sequence[tuple[str, str, str]]) -> Figures:
        """Spent and reserved now for each (subject, window, period)."""


_UPSERT = ("INSERT INTO budget_spend (subject, window, period, spent) VALUES (?, ?, ?, ?) "
           "ON CONFLICT (subject, window, period) DO UPDATE SET spent = spent + excluded.spent RETURNING spent")
THREAD_EVERY = 64  # one call in this many takes the thread's connection, whose commits checkpoint the WAL


class SQLiteBudgetStore:
    """The state file, two ways: `at_once`, kept for the
    worker's life and used on the caller's greenlet — it never waits (busy timeout 0) and never
    checkpoints — and, when another process holds the write lock (or one call in THREAD_EVERY, whose
    commit checkpoints the WAL), a connection of the call's own on a thread, which waits for the
    lock as the file's other stores do. Without a file (`state_path: null`), one private in-memory database."""

    blocking = True

    def __init__(self, state_file: sqlite.StateFile | None, clock: Callable[[], float] = time.time) -> None:
        self.file = state_file
        self._clock = clock
        self._lock = threading.Lock()  # the in-memory database: one call at a time
        self._calls = 0
        if state_file is None:
            self.blocking = False
            self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            # the budget tables alone (the migration that made them), not the whole file's schema
            tables = next(sql for _, description, sql in MIGRATIONS if description.startswith("USD budgets"))
            self._db.executescript(tables)
            self._quick: sqlite3.Connection | None = None
        else:
            self._quick = state_file.connect(busy_timeout=0)
            self._quick.execute("PRAGMA wal_autocheckpoint=0")

    @classmethod
    def in_memory(cls, clock: Callable[[], float] = time.time) -> SQLiteBudgetStore:
        return cls(None, clock)

    def at_once(self, op: Callable[[sqlite3.Connection], T]) -> tuple[bool, T | None]:
        """`op` in a transaction on the caller's greenlet, if the write lock is free now: (True, its
        result); (False, None) when the caller must run it on a thread (`run`)."""
        self._calls += 1
        if self._quick is None or self._calls % THREAD_EVERY == 0:
            return False, None
        try:
            self._quick.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:  # another process is writing
            return False, None
        try:
            result = op(self._quick)
            self._quick.execute("COMMIT")
        except Exception:
            with contextlib.suppress(sqlite3.Error):
                self._quick.execute("ROLLBACK")
            return False, None  # the thread tries again, and reports what fails there
        return True, result

    def run(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """`op` in one `BEGIN IMMEDIATE` transaction: for the file on a connection of its own (blocking:
        callers run it on a thread), for memory on the private database."""
        if self.file is not None:
            with self.file.write_transaction() as db:
                return op(db)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                result = op(self._db)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return result

    # ------------------------------------------------------------ the operations, inside a transaction

    def admitting(self, lines: Sequence[Line], lease: str) -> Callable[[sqlite3.Connection], Refusal | None]:
        def op(db: sqlite3.Connection) -> Refusal | None:
            now = self._clock()
            self._expire(db, sorted({line.subject for line in lines}), now)
            for line in lines:
                spent, held = _spent_and_held(db, line.subject, line.window, line.period)
                if spent + held + line.amount > line.limit:
                    return Refusal(line, spent, held)
            db.executemany("INSERT OR REPLACE INTO budget_holds (lease, subject, window, period, amount, expires) "
                           "VALUES (?, ?, ?, ?, ?, ?)",
                           [(lease, line.subject, line.window, line.period, line.amount, now + LEASE_TTL)
                            for line in lines])
            return None
        return op

    def settling(self, lines: Sequence[Line], lease: str, cost: int) -> Callable[[sqlite3.Connection], list[int]]:
        def op(db: sqlite3.Connection) -> list[int]:
            live = set(db.execute("DELETE FROM budget_holds WHERE lease=? RETURNING subject, window",
                                  (lease,)).fetchall())
            # A hold already expired was charged at its amount: charge only what is left.
            return [db.execute(_UPSERT, (line.subject, line.window, line.period,
                                         cost if (line.subject, line.window) in live else cost - line.amount)
                               ).fetchone()[0] for line in lines]
        return op

    @staticmethod
    def _expire(db: sqlite3.Connection, subjects: Sequence[str], now: float) -> None:
        """Charge the holds of these subjects whose lease expired as spent, at their full amount."""
        marks = ",".join("?" * len(subjects))
        dead = db.execute(f"DELETE FROM budget_holds WHERE subject IN ({marks}) AND expires<=? "
                          "RETURNING subject, window, period, amount", (*subjects, now)).fetchall()
        if dead:
            db.executemany(_UPSERT.removesuffix(" RETURNING spent"), dead)

    # ------------------------------------------------------------ the interface

    def admit(self, lines: Sequence[Line], lease: str) -> Refusal | None:
        return self.run(self.admitting(lines, lease))

    def settle(self, lines: Sequence[Line], lease: str, cost: int) -> list[int]:
        return self.run(self.settling(lines, lease, cost))

    def renew(self, leases: Sequence[tuple[str, Sequence[str]]]) -> None:
        def op(db: sqlite3.Connection) -> None:
            expires = self._clock() + LEASE_TTL
            db.executemany("UPDATE budget_holds SET expires=? WHERE subject=? AND lease=?",
                           [(expires, subject, lease) for lease, subjects in leases for subject in subjects])
        self.run(op)

    def figures(self, wanted: Sequence[tuple[str, str, str]]) -> Figures:
        def op(db: sqlite3.Connection) -> Figures:  # a write: expired holds are charged first, as admit would
            self._expire(db, sorted({subject for subject, _, _ in wanted}), self._clock())
            return {(subject, window): _spent_and_held(db, subject, window, period)
                    for subject, window, period in wanted}
        return self.run(op)


def _spent_and_held(db: sqlite3.Connection, subject: str, window: str, period: str) -> tuple[int, int]:
    spent, held = db.execute(
        "SELECT (SELECT spent FROM budget_spend WHERE subject=?1 AND window=?2 AND period=?3), "
        "(SELECT SUM(amount) FROM budget_holds WHERE subject=?1 AND window=?2 AND period=?3)",
        (subject, window, period)).fetchone()
    return int(spent or 0), int(held or 0)
