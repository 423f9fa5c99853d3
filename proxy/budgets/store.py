"""Where budget figures live: the `BudgetStore` interface and its SQLite store (tables of its own in
the `state_path` file, shared by the host's workers; the same code over a private in-memory
database is the store of `state_path: null`, one worker). The Redis store (several hosts) is
proxy/budgets/redis_store.py.

Owns keeping the figures and changing them atomically: per subject, window and period what was
`spent` (`budget_spend`), and the reservations of requests in flight (`budget_holds`, one row per
request and line, with a lease that expires `LEASE_TTL` seconds after it was last renewed).
`admit` checks every line — spent + reserved + this request's amount ≤ limit — and reserves them
all, in one `BEGIN IMMEDIATE` transaction: one writer at a time across the host's processes, so two
workers can never both take the last dollar. Requests that ended are `Charge`s: their holds
replaced by their real cost, carried by the worker's next `admit` (or `settle`d alone when none
comes soon: proxy/budgets/guard.py), so a request costs the store one transaction. A hold whose
lease expired (its worker died, or could not renew it) counts as reserved until a sweep (every
SWEEP_EVERY seconds, in some worker's `admit`) charges it as spent at its full amount — a budget is
never exceeded by a request nobody settled — and a late charge of it adds only the difference
(real cost - amount).
SQLite calls block (`blocking` is True): callers run them on a real thread. Pure of Flask,
requests and gevent.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from proxy.budgets.windows import Charge, Line, LineId, Refusal, line_id
from proxy.state import sqlite
from proxy.state.schema import MIGRATIONS

T = TypeVar("T")
LEASE_TTL = 12.0  # seconds a request's hold lives unless renewed (the limiter's leases live as long)

Figures = dict[tuple[str, str], tuple[int, int]]  # (subject, window) → (spent, reserved) in the period asked


class BudgetStore(Protocol):
    blocking: bool  # True when calls block (run them on a thread)

    def admit(self, lines: Sequence[Line], charges: Sequence[Charge] = ()) -> Admitted:
        """First charge `charges` (requests that ended: `settle`'s work, carried here so that a
        request costs one step of the store), then check every line and, if all have room, hold
        them under a lease of their own (`Admitted.lease`) — atomically. The charges are kept
        whether or not the request is let in."""

    def settle(self, charges: Sequence[Charge]) -> Spent:
        """Requests that ended: charge each its real cost on its lines' periods and drop its holds.
        Returns, per figure charged, its spend now and what the charges added (alerts read both)."""

    def renew(self, leases: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Extend these holds (lease, its subjects) by LEASE_TTL from now."""

    def figures(self, wanted: Sequence[tuple[str, str, str]]) -> Figures:
        """Spent and reserved now for each (subject, window, period)."""


Spent = dict[LineId, tuple[int, int]]  # per figure charged: its spend after the charges, and what they added


@dataclass(frozen=True, slots=True)
class Admitted:
    refusal: Refusal | None  # None: held
    spent: Spent  # after the charges carried
    lease: str = ""  # the holds' name (unique across workers and hosts), which their charge gives back


SWEEP_EVERY = LEASE_TTL / 3  # seconds between two sweeps of expired leases, per worker


class SQLiteBudgetStore:
    """The state file, two ways: `at_once`, kept for the worker's life and used on the caller's
    greenlet — it never waits (busy timeout 0) and never checkpoints (the usage writer's commits on
    its thread do, every request writing usage) — and, when another process holds the write lock,
    a connection of the call's own on a thread, which waits for the lock as the file's other stores
    do. Without a file (`state_path: null`), one private in-memory database.

    The figures: `budget_spend` holds per (subject, window, period) what is `spent` and `held`;
    `budget_worker_holds` what each worker holds of it, `budget_workers` each worker's lease. A
    worker is known by an id of its own (`worker`), its holds by leases `<worker>/<n>`. If the
    worker's lease expired and was swept (it could not renew for LEASE_TTL seconds), it takes a new
    id: the charges of holds made under the old one add only cost - amount.

    One request is one transaction of three statements (`admit`, carrying the charges of requests
    that ended before it): the worker's lease read, every figure changed in one multi-row upsert
    that returns them (charges, and this request's holds; checked after it, and taken back in one
    more statement when a line would go over), the worker's holds changed likewise —
    bench/budgets_overhead.py."""

    blocking = True

    def __init__(self, state_file: sqlite.StateFile | None, clock: Callable[[], float] = time.time) -> None:
        self.file = state_file
        self._clock = clock
        self._lock = threading.Lock()  # the in-memory database: one call at a time
        self._next_sweep = 0.0
        self.worker = uuid.uuid4().hex[:16]
        self._live = f"{self.worker}/"  # the prefix of the leases of holds made under its current id
        self._leases = itertools.count()
        self._lease_until = 0.0  # when this worker's lease row expires, as last written
        self._registered = False  # whether its lease row was ever written (missing since: swept)
        if state_file is None:
            self.blocking = False
            self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            # the budget tables alone (the migrations that made them), not the whole file's schema
            for _, description, sql in MIGRATIONS:
                if description.startswith("USD budgets"):
                    self._db.executescript(sql)
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
        if self._quick is None:
            return False, None
        try:
            self._quick.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:  # another process is writing
            return False, None
        try:
            result = op(self._quick)
            self._quick.execute("COMMIT")
        except Exception:
            self._rolled_back()
            with contextlib.suppress(sqlite3.Error):
                self._quick.execute("ROLLBACK")
            return False, None  # the thread tries again, and reports what fails there
        return True, result

    def run(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """`op` in one `BEGIN IMMEDIATE` transaction: for the file on a connection of its own (blocking:
        callers run it on a thread), for memory on the private database."""
        try:
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
        except BaseException:
            self._rolled_back()
            raise

    # ------------------------------------------------------------ the operations, inside a transaction

    def admitting(self, lines: Sequence[Line],
                  charges: Sequence[Charge] = ()) -> Callable[[sqlite3.Connection], Admitted]:
        def op(db: sqlite3.Connection) -> Admitted:
            now = self._clock()
            if now >= self._next_sweep:  # expired holds count as held until swept: sweeping is bookkeeping
                self._sweep(db, now)
                self._next_sweep = now + SWEEP_EVERY
            live = self._own_lease(db, now)
            lease = f"{live}{next(self._leases):x}"  # named after the worker's id, as it is now
            spent_delta, held_delta = _deltas(charges, live)
            for line in lines:
                at = line_id(line)
                held_delta[at] = held_delta.get(at, 0) + line.amount
            figures = _change(db, spent_delta, held_delta)
            spent = {at: (figures[at][0], added) for at, added in spent_delta.items()}
            for line in lines:
                line_spent, held = figures[line_id(line)]
                if line_spent + held > line.limit:
                    _change(db, {}, {line_id(other): -other.amount for other in lines})  # take the holds back
                    for other in lines:
                        held_delta[line_id(other)] -= other.amount
                    self._hold(db, {at: d for at, d in held_delta.items() if d})
                    return Admitted(Refusal(line, line_spent, held - line.amount), spent)
            self._hold(db, held_delta)
            return Admitted(None, spent, lease)
        return op

    def settling(self, charges: Sequence[Charge]) -> Callable[[sqlite3.Connection], Spent]:
        def op(db: sqlite3.Connection) -> Spent:
            spent_delta, held_delta = _deltas(charges, self._own_lease(db, self._clock()))
            figures = _change(db, spent_delta, held_delta)
            self._hold(db, held_delta)
            return {at: (figures[at][0], added) for at, added in spent_delta.items()}
        return op

    def _own_lease(self, db: sqlite3.Connection, now: float) -> str:
        """This worker's id, its lease renewed when a third of it has gone; a new id if its lease
        was swept. Returns the lease prefix whose holds are live."""
        if now + LEASE_TTL * 2 / 3 < self._lease_until:  # written a moment ago: nobody can have swept it
            return self._live
        renewed = db.execute("UPDATE budget_workers SET expires=? WHERE worker=?", (now + LEASE_TTL, self.worker))
        if not renewed.rowcount:
            if self._registered:  # swept: what it held was charged in full; start again under a new id
                self.worker = uuid.uuid4().hex[:16]
                self._live = f"{self.worker}/"
            db.execute("INSERT INTO budget_workers (worker, expires) VALUES (?, ?)", (self.worker, now + LEASE_TTL))
            self._registered = True
        self._lease_until = now + LEASE_TTL  # forgotten if the transaction rolls back (`_rolled_back`)
        return self._live

    def _rolled_back(self) -> None:
        self._lease_until = 0.0  # what the transaction wrote of the lease is gone: write it again next time

    def _hold(self, db: sqlite3.Connection, held_delta: dict[LineId, int]) -> None:
        if held_delta:
            db.execute(_hold_sql(len(held_delta)),
                       [part for at, delta in held_delta.items() for part in (self.worker, *at, delta)])

    @staticmethod
    def _sweep(db: sqlite3.Connection, now: float) -> None:
        """Charge what workers whose lease expired hold as spent, at its full amount."""
        dead = [worker for (worker,) in db.execute("DELETE FROM budget_workers WHERE expires<=? RETURNING worker",
                                                   (now,))]
        for worker in dead:
            held = {(subject, window, period): amount for subject, window, period, amount in db.execute(
                "DELETE FROM budget_worker_holds WHERE worker=? RETURNING subject, window, period, held", (worker,))
                if amount}
            if held:
                _change(db, held, {at: -amount for at, amount in held.items()})

    # ------------------------------------------------------------ the interface

    def admit(self, lines: Sequence[Line], charges: Sequence[Charge] = ()) -> Admitted:
        return self.run(self.admitting(lines, charges))

    def settle(self, charges: Sequence[Charge]) -> Spent:
        return self.run(self.settling(charges))

    def renew(self, leases: Sequence[tuple[str, Sequence[str]]]) -> None:
        """The worker's lease, whichever holds are open (they all live under it)."""
        def op(db: sqlite3.Connection) -> None:
            self._own_lease(db, self._clock())
            db.execute("DELETE FROM budget_worker_holds WHERE worker=? AND held=0", (self.worker,))
        self.run(op)

    def figures(self, wanted: Sequence[tuple[str, str, str]]) -> Figures:
        def op(db: sqlite3.Connection) -> Figures:
            self._sweep(db, self._clock())  # the operator sees expired holds charged, as the next admit would
            found = {(subject, window, period): (spent, held) for subject, window, period, spent, held in db.execute(
                f"SELECT s.subject, s.window, s.period, s.spent, s.held FROM budget_spend s JOIN (VALUES "
                f"{_rows(len(wanted), 3)}) w ON s.subject=w.column1 AND s.window=w.column2 AND s.period=w.column3",
                [part for at in wanted for part in at])}
            return {(subject, window): found.get((subject, window, period), (0, 0))
                    for subject, window, period in wanted}
        return self.run(op) if wanted else {}


def _deltas(charges: Sequence[Charge], live: str) -> tuple[dict[LineId, int], dict[LineId, int]]:
    """What `charges` add to each figure's spend and take from its holds: a request's cost on each of
    its lines, its holds released — unless they were made under a lease no longer `live` (swept:
    already charged in full), when they add cost - amount and release nothing."""
    spent: dict[LineId, int] = {}
    held: dict[LineId, int] = {}
    for lines, lease, cost in charges:
        if lease.startswith(live):
            for line in lines:
                at = line_id(line)
                spent[at] = spent.get(at, 0) + cost
                held[at] = held.get(at, 0) - line.amount
        else:
            for line in lines:
                at = line_id(line)
                spent[at] = spent.get(at, 0) + cost - line.amount
    return spent, held


def _change(db: sqlite3.Connection, spent: dict[LineId, int], held: dict[LineId, int]) -> dict[LineId, tuple[int, int]]:
    """Add to figures' spent and held, in one statement: returns each changed figure's (spent, held) now."""
    keys = spent.keys() | held.keys()
    if not keys:
        return {}
    rows = db.execute(_change_sql(len(keys)),
                      [part for at in keys for part in (*at, spent.get(at, 0), held.get(at, 0))]).fetchall()
    return {(subject, window, period): (s, h) for subject, window, period, s, h in rows}


@functools.cache
def _change_sql(count: int) -> str:
    return (f"INSERT INTO budget_spend (subject, window, period, spent, held) VALUES {_rows(count, 5)} "
            "ON CONFLICT (subject, window, period) DO UPDATE SET spent = spent + excluded.spent, "
            "held = held + excluded.held RETURNING subject, window, period, spent, held")


@functools.cache
def _hold_sql(count: int) -> str:
    return (f"INSERT INTO budget_worker_holds (worker, subject, window, period, held) VALUES {_rows(count, 5)} "
            "ON CONFLICT (worker, subject, window, period) DO UPDATE SET held = held + excluded.held")


@functools.cache
def _rows(count: int, width: int) -> str:
    row = f"({', '.join('?' * width)})"
    return ", ".join([row] * count)
