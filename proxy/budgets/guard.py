"""The request's side of USD budgets: let a request in or refuse it, and charge it when it ends.

Owns, for a key under any budget (its own, and each key group's it is in):
- `admit`, when the request arrives (after its key's model check and limits): the worst case
  (proxy/budgets/sizing.py) held against every line of every budget in one atomic step of the
  store (proxy/budgets/store.py, redis_store.py), or a refusal in the client's protocol — kind
  `budget` (OpenAI: 429 `insufficient_quota`; Anthropic: 400 `invalid_request_error`), naming
  the key or group, the window, what is spent and reserved, and when it resets. A model with no
  price on a route it may take is refused (403) unless `pricing.unknown: allow`. Nothing is retried
  on another account: the request never reaches the relay.
- as a hook, `request_done` when it ends: a `Charge` — its holds to be replaced by its real cost,
  `record.cost_micros` (the cost hook runs first), or computed here from its usage when that hook
  is absent; an answered request whose usage never came is charged what it reserved; a request that
  failed before any usage is released (charged 0); one whose price is unknown (allowed) is charged
  0. The charge is queued and rides in the worker's next `admit` — one step of the store per
  request (one Redis round trip, one SQLite transaction) — or goes alone after SETTLE_WITHIN
  seconds when no request comes, and when the worker exits (`flush_all`). Until then the store
  counts its holds as reserved: never less than it will be charged, so a budget is never exceeded;
  another worker may meanwhile refuse a request that the charge would have let in.
- alerts: the charges that take a window past its `alert_at` share tell `Alerts` once.
- renewal: the holds of requests still running are renewed every LEASE_TTL / 3 seconds; those of a
  worker that died expire and are charged at their full amount (never lost, never exceeding).
The store is one, never a stand-in: a budget held per host or per worker is no budget. While it
cannot be reached (Redis away, the state file unwritable) budgeted requests are refused with a 503
saying budgets cannot be checked; keys without a budget never touch it.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import gevent

from proxy.budgets import windows
from proxy.budgets.alerts import Alerts
from proxy.budgets.sizing import size
from proxy.budgets.store import LEASE_TTL, BudgetStore, Spent
from proxy.budgets.windows import Charge, Line, LineId, Subject, line_id
from proxy.config.keys import ClientKey
from proxy.config.model import Config
from proxy.errors import ProxyError
from proxy.ir.request import Request
from proxy.money.cost import cost_micros
from proxy.money.prices import PriceBook
from proxy.ops.hooks import Hooks
from proxy.ops.records import RequestRecord
from proxy.routing import Route
from proxy.upstream.keeper import blocking, call_store

log = logging.getLogger("proxy.budgets")
T = TypeVar("T")
SETTLE_WITHIN = 0.2  # seconds a charge waits for the worker's next admission before going alone


@dataclass
class _Due:
    """A request that ended, until the store has its charge: what its alerts need beside it."""

    charge: Charge
    key: str
    alert_at: dict[str, float] | None  # subject id → its budget's alert_at; None: no budget of it has one
    webhook_url: str | None


@dataclass
class _Held:
    record: RequestRecord
    key: str
    lines: tuple[Line, ...]
    subjects: list[Subject]
    alert_at: dict[str, float] | None
    lease: str
    amount: int
    book: PriceBook
    webhook_url: str | None  # the config's alerts.webhook_url when the request arrived
    # Holds added when the request fell back to another model whose worst case is higher (`extend`):
    # released, not charged, at its end — its cost is charged once, against `lines`.
    extra: list[tuple[tuple[Line, ...], str]] = field(default_factory=list)  # (lines, lease)


class _ConfigView:
    """One config's prices, and per client key the budgets it falls under (asked by every request)."""

    def __init__(self, config: Config, book: PriceBook) -> None:
        self.config = config
        self.book = book
        self._keys: dict[int, _KeyBudgets] = {}  # by id() of the key's entry (kept in it: ids are reused)

    def of(self, entry: ClientKey) -> _KeyBudgets:
        found = self._keys.get(id(entry))
        if found is None or found.entry is not entry:
            subjects = windows.subjects(self.config, entry)
            alert_at = {s.id: s.budget.alert_at for s in subjects if s.budget.alert_at is not None}
            found = self._keys[id(entry)] = _KeyBudgets(entry, subjects, windows.limits(subjects), alert_at or None)
        return found


@dataclass(frozen=True)
class _KeyBudgets:
    """The budgets a client key falls under."""

    entry: ClientKey
    subjects: list[Subject]
    limits: tuple[windows.Limit, ...]  # what each request's lines are made of
    alert_at: dict[str, float] | None  # subject id → its alert_at share; None when no budget has one


class Budgets(Hooks):
    def __init__(self, store: BudgetStore, clock: Callable[[], float] = time.time,
                 alerts: Alerts | None = None) -> None:
        self.store = store
        self.clock = clock  # wall clock: which UTC day and month a request is charged in
        self.alerts = alerts or Alerts()
        self._open: dict[int, _Held] = {}  # by id() of the request's record
        self._due: list[_Due] = []  # requests that ended, their charges not yet in the store
        self._flusher: gevent.Greenlet | None = None
        _every.add(self)
        self._renewer: gevent.Greenlet | None = None
        self._view: _ConfigView | None = None

    def book(self, config: Config) -> PriceBook:
        return self._of(config).book

    def _of(self, config: Config) -> _ConfigView:
        """What the guard reads of `config`, made once (again when a reload brings another)."""
        if self._view is None or self._view.config is not config:
            self._view = _ConfigView(config, PriceBook(config))
        return self._view

    # ------------------------------------------------------------ the request's start

    def admit(self, config: Config, entry: ClientKey | None, record: RequestRecord, routes: Sequence[Route],
              request: Callable[[], Request | None], tokens: Callable[[], int], body: dict[str, Any],
              input_only: bool = False) -> None:
        """Hold the request's worst case against every budget it falls under, or raise the refusal.
        `input_only`: a request priced by its input tokens alone (embeddings: no output, no cache writes)."""
        if entry is None:
            return
        view = self._of(config)
        found = view.of(entry)
        subjects = found.subjects
        if not subjects or not routes:  # no budget; or a model no upstream serves (the relay's 404)
            return
        book = view.book
        sizing = size(routes, book, config.budgets, tokens(), request(), body, input_only)
        refused = [r for r in sizing.unpriced if not book.unknown_allowed(r.upstream.name)]
        if refused:
            route = refused[0]
            raise ProxyError(403, f"{windows.who(subjects[0].id, entry.name)} has a USD budget, and the model "
                                  f"{record.model!r} has no price on the upstream {route.upstream.name!r} (as "
                                  f"{route.model!r}): a budgeted key may not run unpriced requests. Set its "
                                  "price under `pricing.models`, or `pricing.unknown: allow`.", "permission",
                             code="model_not_priced")
        now = self.clock()
        lines = windows.lines(found.limits, sizing.amount, now)
        due, self._due = self._due, []  # the charges of requests that ended ride in this step
        charges = [d.charge for d in due]
        try:
            admitted = self._call(lambda s: s.admitting(lines, charges), lambda s: s.admit(lines, charges))
        except Exception as exc:
            self._due[:0] = due
            log.warning("budgets: the budget store does not answer (%s: %s); refusing the request of the budgeted "
                        "key %r", type(exc).__name__, exc, entry.name)
            raise ProxyError(503, "Budgets cannot be checked now: the proxy's budget store does not answer, so "
                                  f"requests of keys with a USD budget (such as {entry.name!r}) are refused until "
                                  "it does. Retry shortly.", "unavailable", code="budget_store_unavailable",
                             headers={"Retry-After": "5"}) from None
        self._alert(due, admitted.spent)
        if admitted.refusal is not None:
            raise ProxyError(429, windows.message(admitted.refusal, entry.name, now), "budget")
        self._open[id(record)] = _Held(record, entry.name, lines, subjects, found.alert_at, admitted.lease,
                                       sizing.amount, book, config.alerts.webhook_url)
        self._start_renewer()

    def extend(self, config: Config, record: RequestRecord, routes: Sequence[Route],
               request: Callable[[], Request | None], tokens: Callable[[], int], body: dict[str, Any],
               input_only: bool = False) -> str | None:
        """Before a request falls back to another model (proxy/relay/fallbacks.py): hold the rest of
        that model's worst case, if it is higher than what the request holds. None when held (or no
        budget applies); else why not — a fallback a budget cannot cover is not taken, so a budget is
        never exceeded by one."""
        held = self._open.get(id(record))
        if held is None or held.record is not record:
            return None  # not budgeted
        sizing = size(routes, self._of(config).book, config.budgets, tokens(), request(), body, input_only)
        if sizing.unpriced and not all(self._of(config).book.unknown_allowed(r.upstream.name)
                                       for r in sizing.unpriced):
            return "it has no price and the key has a USD budget"
        more = sizing.amount - held.amount
        if more <= 0:
            return None
        now = self.clock()
        lines = windows.lines(windows.limits(held.subjects), more, now)
        try:
            admitted = self._call(lambda s: s.admitting(lines, []), lambda s: s.admit(lines, []))
        except Exception as exc:
            return f"the budget store does not answer ({type(exc).__name__})"
        if admitted.refusal is not None:
            return "the budget cannot hold its worst case: " + windows.message(admitted.refusal, held.key, now)
        held.extra.append((lines, admitted.lease))
        held.amount += more
        return None

    # ------------------------------------------------------------ the request's end (a hook)

    def request_done(self, record: RequestRecord) -> None:
        """Its holds are to be replaced by its cost: queued for the store, which gets it with the
        worker's next admission, or within SETTLE_WITHIN seconds when none comes."""
        held = self._open.pop(id(record), None)
        if held is None or held.record is not record:
            return
        self._due.append(_Due(Charge(held.lines, held.lease, self._cost(record, held)), held.key, held.alert_at,
                              held.webhook_url))
        for lines, lease in held.extra:  # a fallback's added holds: released, the cost was charged above
            self._due.append(_Due(Charge(lines, lease, 0), held.key, None, held.webhook_url))
        if self._flusher is None:
            self._flusher = gevent.spawn_later(SETTLE_WITHIN, self._flush_later)

    def _flush_later(self) -> None:
        self._flusher = None
        self.flush()
        if self._due:  # the store did not answer: try again later (holds expire meanwhile, charged in full)
            self._flusher = gevent.spawn_later(LEASE_TTL / 3, self._flush_later)

    def flush(self) -> None:
        """Send the store every charge still queued (the worker exiting calls this too)."""
        due, self._due = self._due, []
        if not due:
            return
        charges = [d.charge for d in due]
        try:
            spent = self._call(lambda s: s.settling(charges), lambda s: s.settle(charges))
        except Exception as exc:
            self._due[:0] = due
            log.warning("budgets: could not charge %d requests that ended (%s: %s); trying again, and their "
                        "reservations are charged in full if they expire first", len(due), type(exc).__name__, exc)
            return
        self._alert(due, spent)

    def _alert(self, due: Sequence[_Due], spent: Spent) -> None:
        """Tell `Alerts` of each window the charges took past its `alert_at` share (one per figure)."""
        told: set[LineId] = set()
        for d in reversed(due):  # the last charge on a figure names the key that crossed
            if d.alert_at is None:
                continue
            for line in d.charge.lines:
                at = line_id(line)
                alert_at = d.alert_at.get(line.subject)
                if alert_at is None or at in told or at not in spent:
                    continue
                now_spent, added = spent[at]
                if now_spent - added < alert_at * line.limit <= now_spent:
                    told.add(at)
                    self.alerts.crossed(line, now_spent, alert_at, d.key, self.clock(), d.webhook_url)

    def _call(self, quick: Callable[[Any], Any], call: Callable[[Any], T]) -> T:
        """`call` on the store — but first, for a store that can (the state file's), `quick`'s
        operation on this greenlet if the file's write lock is free now: no thread, no wait."""
        store = self.store
        at_once = getattr(store, "at_once", None)
        if at_once is not None:
            done, result = at_once(quick(store))
            if done:
                return result
        return call_store(store, lambda: call(store))

    @staticmethod
    def _cost(record: RequestRecord, held: _Held) -> int:
        usage = record.usage
        if usage is not None and (usage.input_tokens or usage.output_tokens):
            return real_cost(record, held.book) or 0  # None: no price, allowed by pricing.unknown
        if record.status and record.status < 400:
            return held.amount  # answered, but the upstream never said what it used
        return 0  # failed before any usage: released

    # ------------------------------------------------------------ operators' view

    def figures(self, config: Config, subjects: Sequence[Subject]) -> dict[str, dict[str, dict[str, Any]]]:
        """Per subject id, per window: limit, spent, reserved, remaining (USD) and resets_in (seconds)."""
        self.flush()  # this worker's queued charges first (other workers' go within SETTLE_WITHIN)
        now = self.clock()
        wanted = [(s.id, window, windows.period(window, now)) for s in subjects for window in s.budget.windows()]
        found = call_store(self.store, lambda: self.store.figures(wanted))
        shown: dict[str, dict[str, dict[str, Any]]] = {}
        for s in subjects:
            for window, limit in s.budget.windows().items():
                spent, reserved = found[(s.id, window)]
                ends = windows.resets_at(window, now)
                shown.setdefault(s.id, {})[window] = {
                    "limit_usd": limit / 1e6, "spent_usd": spent / 1e6, "reserved_usd": reserved / 1e6,
                    "remaining_usd": max(0, limit - spent - reserved) / 1e6,
                    "resets_in": None if ends is None else int(ends - now)}
        return shown

    # ------------------------------------------------------------ holds of requests in flight

    def _start_renewer(self) -> None:
        if self._renewer is not None and not self._renewer.dead:
            return
        self._renewer = gevent.spawn(self._renew_while_held)

    def _renew_while_held(self) -> None:
        while True:
            gevent.sleep(LEASE_TTL / 3)
            if not self._open:
                return
            self.renew()

    def renew(self) -> None:
        leases = [(lease, sorted({line.subject for line in lines}))
                  for held in list(self._open.values()) for lines, lease in ((held.lines, held.lease), *held.extra)]
        if not leases:
            return
        try:
            if self.store.blocking:
                blocking(self.store.renew, leases)
            else:
                self.store.renew(leases)
        except Exception as exc:
            log.warning("budgets: could not renew %d reservations (%s: %s)", len(leases), type(exc).__name__, exc)


_every: weakref.WeakSet[Budgets] = weakref.WeakSet()  # this process's, for flush_all


def flush_all() -> None:
    """Charge every request that ended in this process (gunicorn's worker_exit hook calls this)."""
    for budgets in list(_every):
        budgets.flush()


def real_cost(record: RequestRecord, book: PriceBook) -> int | None:
    """What the request cost: the cost hook's figure, else its usage at the price of where it went."""
    if record.cost_micros is not None:
        return record.cost_micros
    if record.usage is None or record.upstream is None or record.upstream_model is None:
        return None
    price = book.price(record.upstream, record.upstream_model)
    return cost_micros(record.usage, price) if price is not None else None
