"""An account's state and counters, and the transitions between states.

Owns the lifecycle: `active` → `cooling` until a time (exhausted, rate-limited) → `active` again
once that time has passed; `active` → `disabled` with a reason and a since-time (revoked key) →
`active` only when re-enabled (by a probe that succeeds, or by an admin). Times are wall-clock
seconds so they mean the same in every worker and after a restart. Persisting and sharing the
changes is the pool's and the store's business, not this module's.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.config import Account

ACTIVE, COOLING, DISABLED = "active", "cooling", "disabled"


@dataclass
class AccountState:
    account: Account
    status: str = ACTIVE
    until: float | None = None  # cooling ends at this wall-clock time
    reason: str | None = None  # why it is cooling or disabled
    since: float | None = None  # when it left `active`
    balance: float | None = None
    # counters, summed over every worker through the store
    requests: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    last_used: float = 0.0
    # this worker only
    in_flight: int = 0
    # the latest failed attempt on this worker: {"class", "message", "at"} — what the status page
    # shows beside `reason`, which only says why the account is out of rotation (if it is)
    last_error: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return self.account.id

    def available(self, now: float) -> bool:
        """In rotation: active, or cooling whose time is up."""
        return self.status == ACTIVE or (self.status == COOLING and self.until is not None and self.until <= now)

    def has_room(self) -> bool:
        limit = self.account.max_concurrency
        return limit is None or self.in_flight < limit

    def cool(self, until: float, reason: str, now: float) -> None:
        if self.status == DISABLED:
            return  # disabled is the stronger state; cooling must not hide it
        if self.status != COOLING:
            self.since = now
        elif self.until is not None:
            until = max(until, self.until)  # two reset times: the later one is when it can serve again
        self.status, self.until, self.reason = COOLING, until, reason

    def disable(self, reason: str, now: float) -> None:
        self.status, self.until, self.reason, self.since = DISABLED, None, reason, now

    def enable(self) -> None:
        self.status, self.until, self.reason, self.since = ACTIVE, None, None, None

    def settle(self, now: float) -> bool:
        """Return a cooling account whose time is up to `active`; True if that changed anything."""
        if self.status == COOLING and self.until is not None and self.until <= now:
            self.enable()
            return True
        return False

    def public(self, now: float) -> dict[str, Any]:
        """What the admin API shows — never the key itself, only a masked suffix."""
        self.settle(now)
        key = self.account.api_key
        return {
            "id": self.id, "key": f"…{key[-4:]}" if len(key) > 8 else "…", "status": self.status,
            "reason": self.reason, "since": self.since, "until": self.until,
            "weight": self.account.weight, "balance": self.balance, "max_concurrency": self.account.max_concurrency,
            "requests": self.requests, "failures": dict(self.failures), "in_flight": self.in_flight,
            "last_used": self.last_used or None, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
            "last_error": dict(self.last_error) if self.last_error else None,
        }
