"""The request's side of USD budgets: let a request in or refuse it, and charge it when it ends.

Owns, for a key under any budget (its own, and each key group's it is in):
- `admit`, when the request arrives (after its key's model check and limits): the worst case
  (proxy/budgets/sizing.py) held against every line of every budget in one atomic step of the
  store (proxy/budgets/store.py, redis_store.py), or a refusal in the client's protocol — kind
  `budget` (OpenAI: 429 `insufficient_quota`; Anthropic: 400 `invalid_request_error`), naming
  the key or group, the window, what is spent and reserved, and when it resets. A model with no
  price on a route it may take is refused (403) unless `pricing.unknown: allow`. Nothing is retried
  on another account: the request never reaches the relay.
- as a hook, `request_done` when it ends: the holds replaced by its real cost — `record.cost_micros`
  (the cost hook runs first), or computed here from its usage when that hook is absent; an
  answered request whose usage never came is charged what it reserved; a request that failed
  before any usage is released (charged 0); one whose price is unknown (allowed) is charged 0.
- alerts: a settlement that takes a window past its `alert_at` share tells `Alerts` once.
- renewal: the holds of requests still running are renewed every LEASE_TTL / 3 seconds; those of a
  worker that died expire and are charged at their full amount (never lost, never exceeding).
The store is one, never a stand-in: a budget held per host or per worker is no budget. While it
cannot be reached (Redis away, the state file unwritable) budgeted requests are refused with a 503
saying budgets cannot be checked; keys without a budget never touch it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import gevent

from proxy.budgets import windows
from proxy.budgets.alerts import Alerts
from proxy.budgets.sizing import size
from proxy.budgets.store import LEASE_TTL, BudgetStore
from proxy.budgets.windows import Line, Subject
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


@dataclass
class _Held:
    record: RequestRecord
    key: str
    lines: list[Line]
    subjects: list[Subject]
    lease: str
    amount: int
    book: PriceBook
    webhook_url: str | None  # the config's alerts.webhook_url when the request arrived


class Budgets(Hooks):
    def __init__(self, store: BudgetStore, clock: Callable[[], float] = time.time,
                 alerts: Alerts | None = None) -> None:
        self.store = store
        self.clock = clock  # wall clock: which UTC day and month a request is charged in
        self.alerts = alerts or Alerts()
        self._open: dict[int, _Held] = {}  # by id() of the request's record
        self._renewer: gevent.Greenlet | None = None
        self._books: tuple[int, PriceBook] | None = None

    def book(self, config: Config) -> PriceBook:
        """The prices of `config` (built again when a reload brings another)."""
        if self._books is None or self._books[0] != id(config):
            self._books = (id(config), PriceBook(config))
        return self._books[1]

    # ------------------------------------------------------------ the request's start

    def admit(self, config: Config, entry: ClientKey | None, record: RequestRecord, routes: Sequence[Route],
              request: Callable[[], Request | None], tokens: Callable[[], int], body: dict[str, Any]) -> None:
        """Hold the request's worst case against every budget it falls under, or raise the refusal."""
        if entry is None:
            return
        subjects = windows.subjects(config, entry)
        if not subjects or not routes:  # no budget; or a model no upstream serves (the relay's 404)
            return
        book = self.book(config)
        sizing = size(routes, book, config.budgets, tokens(), request(), body)
        refused = [r for r in sizing.unpriced if not book.unknown_allowed(r.upstream.name)]
        if refused:
            route = refused[0]
            raise ProxyError(403, f"{windows.who(subjects[0].id, entry.name)} has a USD budget, and the model "
                                  f"{record.model!r} has no price on the upstream {route.upstream.name!r} (as "
                                  f"{route.model!r}): a budgeted key may not run unpriced requests. Set its "
                                  "price under `pricing.models`, or `pricing.unknown: allow`.", "permission",
                             code="model_not_priced")
        now = self.clock()
        lines = windows.lines(subjects, sizing.amount, now)
        lease = uuid.uuid4().hex
        try:
            refusal = self._call(lambda s: s.admitting(lines, lease), lambda s: s.admit(lines, lease))
        except Exception as exc:
            log.warning("budgets: the budget store does not answer (%s: %s); refusing the request of the budgeted "
                        "key %r", type(exc).__name__, exc, entry.name)
            raise ProxyError(503, "Budgets cannot be checked now: the proxy's budget store does not answer, so "
                                  f"requests of keys with a USD budget (such as {entry.name!r}) are refused until "
                                  "it does. Retry shortly.", "unavailable", code="budget_store_unavailable",
                             headers={"Retry-After": "5"}) from None
        if refusal is not None:
            raise ProxyError(429, windows.message(refusal, entry.name, now), "budget")
        self._open[id(record)] = _Held(record, entry.name, lines, subjects, lease, sizing.amount, book,
                                       config.alerts.webhook_url)
        self._start_renewer()

    # ------------------------------------------------------------ the request's end (a hook)

    def request_done(self, record: RequestRecord) -> None:
        held = self._open.pop(id(record), None)
        if held is None or held.record is not record:
            return
        cost = self._cost(record, held)
        try:
            spent = self._call(lambda s: s.settling(held.lines, held.lease, cost),
                               lambda s: s.settle(held.lines, held.lease, cost))
        except Exception as exc:  # its holds expire and are charged in full: never under-counted
            log.warning("budgets: could not settle a request of the key %r (%s: %s); its reservation of %s will be "
                        "charged in full when it expires", held.key, type(exc).__name__, exc,
                        windows.usd(held.amount))
            return
        budgets = {s.id: s.budget for s in held.subjects}
        for line, now_spent in zip(held.lines, spent, strict=True):
            alert_at = budgets[line.subject].alert_at
            if alert_at is not None:
                threshold = alert_at * line.limit
                if now_spent - cost < threshold <= now_spent:
                    self.alerts.crossed(line, now_spent, alert_at, held.key, self.clock(), held.webhook_url)

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
        leases = [(held.lease, sorted({line.subject for line in held.lines})) for held in list(self._open.values())]
        if not leases:
            return
        try:
            if self.store.blocking:
                blocking(self.store.renew, leases)
            else:
                self.store.renew(leases)
        except Exception as exc:
            log.warning("budgets: could not renew %d reservations (%s: %s)", len(leases), type(exc).__name__, exc)


def real_cost(record: RequestRecord, book: PriceBook) -> int | None:
    """What the request cost: the cost hook's figure, else its usage at the price of where it went."""
    if record.cost_micros is not None:
        return record.cost_micros
    if record.usage is None or record.upstream is None or record.upstream_model is None:
        return None
    price = book.price(record.upstream, record.upstream_model)
    return cost_micros(record.usage, price) if price is not None else None
