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
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from proxy.budgets.windows import Line, Refusal
from proxy.state import sqlite
from proxy.state.schema import MIGRATIONS

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
           "ON CONFLICT (subject, window, period) DO UPDATE SET spent = spent + excluded.spent")


class SQLiteBudgetStore:
    """Each call is one transaction on a connection of its own (the state file), or on the one
    private connection (memory)."""

    blocking = True

    def __init__(self, state_file: sqlite.StateFile | None, clock: Callable[[], float] = time.time) -> None:
        self.file = state_file
        self._clock = clock
        self._memory: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        if state_file is None:
            self._memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._memory.executescript(next(sql for version, _, sql in MIGRATIONS if version == 3))

    @classmethod
    def in_memory(cls, clock: Callable[[], float] = time.time) -> SQLiteBudgetStore:
        return cls(None, clock)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        if self.file is not None:
            with self.file.write_transaction() as db:
                yield db
            return
        assert self._memory is not None
        with self._lock:
            self._memory.execute("BEGIN IMMEDIATE")
            try:
                yield self._memory
                self._memory.execute("COMMIT")
            except BaseException:
                self._memory.execute("ROLLBACK")
                raise

    @staticmethod
    def _expire(db: sqlite3.Connection, subjects: set[str], now: float) -> None:
        """Charge the holds of these subjects whose lease expired as spent, at their full amount."""
        for subject in subjects:
            dead = db.execute("SELECT window, period, amount FROM budget_holds WHERE subject=? AND expires<=?",
                              (subject, now)).fetchall()
            if dead:
                db.executemany(_UPSERT, [(subject, window, period, amount) for window, period, amount in dead])
                db.execute("DELETE FROM budget_holds WHERE subject=? AND expires<=?", (subject, now))

    @staticmethod
    def _spent_and_held(db: sqlite3.Connection, subject: str, window: str, period: str) -> tuple[int, int]:
        row = db.execute("SELECT spent FROM budget_spend WHERE subject=? AND window=? AND period=?",
                         (subject, window, period)).fetchone()
        held = db.execute("SELECT COALESCE(SUM(amount), 0) FROM budget_holds WHERE subject=? AND window=? "
                          "AND period=?", (subject, window, period)).fetchone()
        return (int(row[0]) if row else 0), int(held[0])

    def admit(self, lines: Sequence[Line], lease: str) -> Refusal | None:
        with self._transaction() as db:
            now = self._clock()
            self._expire(db, {line.subject for line in lines}, now)
            for line in lines:
                spent, held = self._spent_and_held(db, line.subject, line.window, line.period)
                if spent + held + line.amount > line.limit:
                    return Refusal(line, spent, held)
            db.executemany("INSERT OR REPLACE INTO budget_holds (lease, subject, window, period, amount, expires) "
                           "VALUES (?, ?, ?, ?, ?, ?)",
                           [(lease, line.subject, line.window, line.period, line.amount, now + LEASE_TTL)
                            for line in lines])
            return None

    def settle(self, lines: Sequence[Line], lease: str, cost: int) -> list[int]:
        with self._transaction() as db:
            spent_now = []
            for line in lines:
                gone = db.execute("DELETE FROM budget_holds WHERE subject=? AND window=? AND lease=?",
                                  (line.subject, line.window, lease)).rowcount
                # A hold already expired was charged at its amount: charge only what is left.
                db.execute(_UPSERT, (line.subject, line.window, line.period, cost if gone else cost - line.amount))
                spent_now.append(self._spent_and_held(db, line.subject, line.window, line.period)[0])
            return spent_now

    def renew(self, leases: Sequence[tuple[str, Sequence[str]]]) -> None:
        with self._transaction() as db:
            expires = self._clock() + LEASE_TTL
            db.executemany("UPDATE budget_holds SET expires=? WHERE subject=? AND lease=?",
                           [(expires, subject, lease) for lease, subjects in leases for subject in subjects])

    def figures(self, wanted: Sequence[tuple[str, str, str]]) -> Figures:
        with self._transaction() as db:  # a write: expired holds are charged first, as admit would
            now = self._clock()
            self._expire(db, {subject for subject, _, _ in wanted}, now)
            return {(subject, window): self._spent_and_held(db, subject, window, period)
                    for subject, window, period in wanted}
