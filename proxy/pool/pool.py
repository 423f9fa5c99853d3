"""One pool of accounts per upstream: leasing an account for an attempt, applying what the attempt
taught us, and keeping the record of changes the store shares with other workers — the accounts'
and their outbound proxies' (`proxy.pool.proxies`): an account whose proxies are all cooling is
out of rotation until one may be tried again.

Owns the in-memory state of this worker's view of the pool; which accounts it has — the file's,
the overlay of runtime additions and removals, and how a reload reconciles them — follows
`proxy.pool.membership`; what a lease is, and why none could be had, `proxy.pool.lease`. Safe
under gevent and threads: every method takes a short lock and never blocks inside it. Nothing
here does IO — the sync greenlet (`proxy.upstream.keeper`) moves `pending()` changes to the store
and `apply_remote` brings others' in.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from proxy.config import Account, Upstream
from proxy.ir.response import Usage
from proxy.pool import selection
from proxy.pool.classify import Classifier, Verdict, cooldown_until, rule
from proxy.pool.lease import LEDGER_FULL_FOR, Availability, Lease, SlotLedger
from proxy.pool.membership import account_from_runtime, reconcile, removed_from_file, runtime_config
from proxy.pool.proxies import ProxyBoard, ProxyState, proxy_id
from proxy.pool.state import ACTIVE, COOLING, DISABLED, AccountState
from proxy.pool.store import AccountRecord, CounterDelta, ProxyRecord


class AccountPool:
    def __init__(self, upstream: Upstream, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self.upstream = upstream
        self.settings = upstream.pool
        self.classifier = _classifier(upstream)
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._states: dict[str, AccountState] = {a.id: AccountState(a, balance=a.balance) for a in upstream.accounts}
        self._removed: set[str] = set()
        self._runtime: dict[str, dict[str, Any]] = {}  # accounts added at runtime: their config
        self._last_chosen: str | None = None
        self._changed: set[str] = set()  # state changes not yet handed to the store
        # When the slot ledger (max_concurrency across hosts) last refused each account: such an
        # account is busy though this worker holds none of its slots.
        self._ledger_full: dict[str, float] = {}
        self._deltas: dict[str, CounterDelta] = {}
        self._proxies = ProxyBoard()
        for account in upstream.accounts:
            self._proxies.know(self.proxies_of(account))
        # Called after a state change, so the keeper writes it now rather than at its next tick.
        self.on_change: Callable[[], None] | None = None
        # Set by the keeper when the store counts max_concurrency across hosts (Redis); None: this worker's count.
        self.slots: SlotLedger | None = None

    # ------------------------------------------------------------ leasing

    def lease(self, exclude: set[str], prefer: str | None = None) -> Lease | None:
        """The policy's choice among accounts in rotation, not in `exclude`, with a free slot — or
        `prefer` if it is one of them (the account that served the conversation's last turn). With a
        ledger (`slots`), an account with `max_concurrency` must also get a slot from it, asked outside
        the lock; one refused is skipped for this lease and the choice is made again."""
        refused: set[str] = set()
        while True:
            now = self._clock()
            with self._lock:
                chosen = self._choose(exclude | refused if refused else exclude, now, prefer)
                if chosen is None:
                    return None
                limit = chosen.account.max_concurrency
                if self.slots is None or limit is None:
                    return self._take(chosen, now, None)
                chosen.in_flight += 1  # held here while the ledger is asked
            slot = self.slots.acquire(self.upstream.name, chosen.id, limit)
            with self._lock:
                chosen.in_flight -= 1
                if slot is not None:
                    self._ledger_full.pop(chosen.id, None)
                    return self._take(chosen, now, slot)
                self._ledger_full[chosen.id] = now  # full on other hosts: busy, for availability()
            refused.add(chosen.id)

    def _choose(self, exclude: set[str], now: float, prefer: str | None = None) -> AccountState | None:
        candidates = [s for s in self._states.values() if s.id not in exclude and s.available(now)
                      and s.has_room() and self._proxies.any_usable(self.proxies_of(s.account), now)]
        preferred = next((s for s in candidates if s.id == prefer), None) if prefer is not None else None
        if preferred is not None:
            return preferred
        return selection.choose(self.settings.policy, candidates, list(self._states), self._last_chosen, self._rng)

    def _take(self, chosen: AccountState, now: float, slot: str | None) -> Lease:
        if chosen.settle(now):
            self._changed.add(chosen.id)
        self._last_chosen = chosen.id
        chosen.in_flight += 1
        chosen.requests += 1
        chosen.last_used = now
        delta = self._delta(chosen.id)
        delta.requests += 1
        delta.last_used = now
        return Lease(self, chosen, slot)

    def _release(self, state: AccountState, failure: str | None, usage: Usage | None, error: str | None) -> None:
        with self._lock:
            state.in_flight -= 1
            delta = self._delta(state.id)
            if failure is not None:
                state.failures[failure] = state.failures.get(failure, 0) + 1
                delta.failures[failure] = delta.failures.get(failure, 0) + 1
                if failure != "client_gone":  # the client left: nothing went wrong with the account
                    state.last_error = {"class": failure, "message": error, "at": self._clock()}
            if usage is not None:
                state.tokens_in += usage.input_tokens
                state.tokens_out += usage.output_tokens
                delta.tokens_in += usage.input_tokens
                delta.tokens_out += usage.output_tokens

    def availability(self) -> Availability:
        now = self._clock()
        out = Availability()
        with self._lock:
            for s in self._states.values():
                out.total += 1
                if s.available(now):
                    urls = self.proxies_of(s.account)
                    if not self._proxies.any_usable(urls, now):
                        out.proxies_cooling += 1
                        wait = self._proxies.next_back(urls, now)
                        if wait is not None:
                            out.next_back = wait if out.next_back is None else min(out.next_back, wait)
                    elif not s.has_room() or now - self._ledger_full.get(s.id, float("-inf")) < LEDGER_FULL_FOR:
                        out.busy += 1
                    continue
                out.reasons[s.reason or s.status] = out.reasons.get(s.reason or s.status, 0) + 1
                if s.status == COOLING:
                    out.cooling += 1
                    wait = (s.until or now) - now
                    out.next_back = wait if out.next_back is None else min(out.next_back, wait)
                elif s.status == DISABLED:
                    out.disabled += 1
        return out

    # ------------------------------------------------------------ what attempts teach us

    def classify(self, status: int, body: str) -> Verdict:
        return self.classifier.classify(status, body)

    def apply(self, lease: Lease, verdict: Verdict, reason: str, headers: Mapping[str, str] | None = None,
              body: str = "") -> None:
        """Carry out a verdict's action on the leased account (fail and next change nothing); `body`,
        the upstream's error body, may say when a rate limit resets (Google's do)."""
        if verdict.action == "cool":
            now = self._clock()
            self.cool(lease.account.id, cooldown_until(headers or {}, now, self.settings.cooldown, body), reason)
        elif verdict.action == "disable":
            self.disable(lease.account.id, reason)

    def cool(self, account_id: str, until: float, reason: str) -> None:
        self._change(account_id, lambda s, now: s.cool(until, reason, now))

    def disable(self, account_id: str, reason: str) -> bool:
        return self._change(account_id, lambda s, now: s.disable(reason, now))

    def enable(self, account_id: str) -> bool:
        return self._change(account_id, lambda s, now: s.enable())

    # ------------------------------------------------------------ outbound proxies

    def proxies_of(self, account: Account) -> tuple[str, ...]:
        """The account's own proxies, else the top-level ones; () to go direct."""
        return account.proxies or self.upstream.proxies

    def choose_proxy(self, account: Account, exclude: set[str]) -> str | None:
        """The proxy for the account's next try, not in `exclude`; None if none may be tried now."""
        with self._lock:
            return self._proxies.choose(self.proxies_of(account), exclude, self._clock())

    def proxy_failed(self, url: str, reason: str) -> float:
        """The proxy failed at the network level: cool it; return for how long."""
        with self._lock:
            wait = self._proxies.fail(url, reason, self._clock())
        self._notify()
        return wait

    def proxy_ok(self, url: str) -> None:
        with self._lock:
            changed = self._proxies.restore(url)
        if changed:
            self._notify()

    def cooling_proxies(self) -> list[tuple[ProxyState, Account | None]]:
        """Cooling proxies, each with an account that uses it (its key goes with a probe)."""
        with self._lock:
            users: dict[str, Account] = {}
            for state in self._states.values():
                for url in self.proxies_of(state.account):
                    users.setdefault(url, state.account)
            return [(p, users.get(p.url)) for p in self._proxies.cooling()]

    def view(self, state: AccountState, now: float) -> dict[str, Any]:
        """An account as the admin API shows it, with the state of each of its proxies."""
        row = state.public(now)
        with self._lock:
            row["proxies"] = [self._proxies.states[u].public(now) for u in self.proxies_of(state.account)
                              if u in self._proxies.states]
        return row

    def set_balance(self, account_id: str, balance: float) -> None:
        self._change(account_id, lambda s, now: setattr(s, "balance", balance))

    def _change(self, account_id: str, change: Callable[[AccountState, float], Any]) -> bool:
        now = self._clock()
        with self._lock:
            state = self._states.get(account_id)
            if state is None:
                return False
            change(state, now)
            self._changed.add(account_id)
        self._notify()
        return True

    def _notify(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # ------------------------------------------------------------ runtime accounts (admin API)

    def add(self, account: Account) -> bool:
        with self._lock:
            if account.id in self._states:
                return False
            self._states[account.id] = AccountState(account)
            self._proxies.know(self.proxies_of(account))
            self._removed.discard(account.id)
            self._runtime[account.id] = runtime_config(account)
            self._changed.add(account.id)
        self._notify()
        return True

    def remove(self, account_id: str) -> bool:
        with self._lock:
            if self._states.pop(account_id, None) is None:
                return False
            self._removed.add(account_id)
            self._runtime.pop(account_id, None)
            self._changed.add(account_id)
        self._notify()
        return True

    def reconfigure(self, upstream: Upstream) -> None:
        """A reloaded config's version of this upstream: its settings, and its accounts as the file
        now lists them with the overlay's additions (proxy.pool.membership). Leases out now end
        on the states they hold."""
        with self._lock:
            self.upstream, self.settings, self.classifier = upstream, upstream.pool, _classifier(upstream)
            changed, dropped = reconcile(upstream.accounts, self._states, self._runtime, self._removed)
            # Dropped from the file is not "removed at runtime": the store must not remember it so.
            self._changed = (self._changed - dropped) | changed
            for state in self._states.values():
                self._proxies.know(self.proxies_of(state.account))
        if changed:
            self._notify()

    def overlay(self) -> tuple[list[str], list[str]]:
        """The overlay on the file: (ids added at runtime, the file's ids deleted at runtime)."""
        with self._lock:
            return list(self._runtime), removed_from_file(self.upstream.accounts, self._removed)

    def busy(self) -> bool:
        """A lease is out on one of its accounts."""
        with self._lock:
            return any(s.in_flight for s in self._states.values())

    # ------------------------------------------------------------ views and sync

    def states(self) -> list[AccountState]:
        with self._lock:
            return list(self._states.values())

    def get(self, account_id: str) -> AccountState | None:
        with self._lock:
            return self._states.get(account_id)

    def pending(self) -> tuple[list[AccountRecord], list[CounterDelta]]:
        """Take the changes the store has not seen yet."""
        with self._lock:
            records = []
            for account_id in self._changed:
                state = self._states.get(account_id)
                if state is None:
                    records.append(AccountRecord(self.upstream.name, account_id, removed=True))
                else:
                    records.append(_to_record(self.upstream.name, state, self._runtime.get(account_id)))
            deltas = list(self._deltas.values())
            self._changed.clear()
            self._deltas.clear()
            return records, deltas

    def restate(self) -> None:
        """Hand the store every account's state again (and the runtime removals) at the next sync:
        for a shared store that lost its data."""
        with self._lock:
            self._changed |= set(self._states) | self._removed

    def apply_remote(self, records: list[AccountRecord], counters: bool = False) -> None:
        """Take in state another worker (or an earlier run) stored. With `counters`, also its totals."""
        with self._lock:
            for record in records:
                if record.id in self._changed:
                    continue  # our own newer change wins; the store will get it at the next sync
                if record.removed:
                    self._states.pop(record.id, None)
                    self._removed.add(record.id)
                    continue
                state = self._states.get(record.id)
                if state is None:
                    if record.runtime is None:
                        continue  # a stored account that is no longer configured
                    state = self._states[record.id] = AccountState(account_from_runtime(record.runtime))
                    self._runtime[record.id] = record.runtime
                    self._proxies.know(self.proxies_of(state.account))
                state.status, state.until, state.reason = record.status, record.until, record.reason
                state.since, state.balance = record.since, record.balance
                if state.status not in (ACTIVE, COOLING, DISABLED):
                    state.status = ACTIVE
                if counters:
                    state.requests, state.failures = record.requests, dict(record.failures)
                    state.tokens_in, state.tokens_out = record.tokens_in, record.tokens_out
                    state.last_used = max(state.last_used, record.last_used)

    def pending_proxies(self) -> list[ProxyRecord]:
        with self._lock:
            records = [_proxy_record(self.upstream.name, self._proxies.states[url]) for url in self._proxies.changed]
            self._proxies.changed.clear()
            return records

    def apply_remote_proxies(self, records: list[ProxyRecord]) -> None:
        with self._lock:
            by_id = {proxy_id(url): state for url, state in self._proxies.states.items()}
            for record in records:
                state = by_id.get(record.id)
                if state is None or state.url in self._proxies.changed:
                    continue  # not a proxy of ours, or our own newer change wins
                state.status, state.until, state.reason = record.status, record.until, record.reason
                state.since, state.failures = record.since, record.failures

    def _delta(self, account_id: str) -> CounterDelta:
        delta = self._deltas.get(account_id)
        if delta is None:
            delta = self._deltas[account_id] = CounterDelta(self.upstream.name, account_id)
        return delta


def _classifier(upstream: Upstream) -> Classifier:
    return Classifier([rule(r.statuses, r.match, r.klass, r.action) for r in upstream.pool.rules])


def _to_record(upstream: str, state: AccountState, runtime: dict[str, Any] | None) -> AccountRecord:
    return AccountRecord(upstream=upstream, id=state.id, status=state.status, until=state.until, reason=state.reason,
                         since=state.since, balance=state.balance, runtime=runtime)


def _proxy_record(upstream: str, state: ProxyState) -> ProxyRecord:
    return ProxyRecord(upstream=upstream, id=proxy_id(state.url), status=state.status, until=state.until,
                       reason=state.reason, since=state.since, failures=state.failures)
