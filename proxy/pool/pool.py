"""One pool of accounts per upstream: leasing an account for an attempt and counting what it did.

Owns the per-account counters and the choice of account (least recently used among those not
yet tried for this request and below their `max_concurrency`). Safe under gevent: no call here
blocks, so no greenlet switch can happen between reading and updating the state.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.config import Account, Upstream
from proxy.ir.response import Usage


@dataclass
class AccountStats:
    account: Account
    requests: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    last_used: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0


class Lease:
    """An account held for one attempt; `release` exactly once (extra calls are ignored)."""

    def __init__(self, pool: AccountPool, stats: AccountStats) -> None:
        self._pool = pool
        self._stats = stats
        self._released = False

    @property
    def account(self) -> Account:
        return self._stats.account

    def release(self, failure: str | None = None, usage: Usage | None = None) -> None:
        if self._released:
            return
        self._released = True
        stats = self._stats
        stats.in_flight -= 1
        if failure is not None:
            stats.failures[failure] = stats.failures.get(failure, 0) + 1
        if usage is not None:
            stats.tokens_in += usage.input_tokens
            stats.tokens_out += usage.output_tokens


class AccountPool:
    def __init__(self, upstream: Upstream, clock: Callable[[], float] = time.monotonic) -> None:
        self.upstream = upstream
        self._clock = clock
        self.stats = {a.id: AccountStats(a) for a in upstream.accounts}

    def lease(self, exclude: set[str]) -> Lease | None:
        """The least recently used account not in `exclude` with a free concurrency slot."""
        best: AccountStats | None = None
        for stats in self.stats.values():
            if stats.account.id in exclude:
                continue
            limit = stats.account.max_concurrency
            if limit is not None and stats.in_flight >= limit:
                continue
            if best is None or stats.last_used < best.last_used:
                best = stats
        if best is None:
            return None
        best.requests += 1
        best.in_flight += 1
        best.last_used = self._clock()
        return Lease(self, best)
