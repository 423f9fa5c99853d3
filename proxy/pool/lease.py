"""What a lease is: an account held for one attempt (`Lease`), why none could be had
(`Availability`, for the 503 and 429 messages), and the ledger that counts `max_concurrency`
beyond this worker (`SlotLedger`, implemented by proxy/pool/redis_slots.py).

Owns the lease's own bookkeeping — released exactly once, its slot given back — and nothing of the
choice: the pool (proxy/pool/pool.py) makes leases and takes them back through `LeaseOwner`, so
this module does not import it. Pure: no IO, no locks of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from proxy.config import Account
from proxy.ir.response import Usage
from proxy.pool.state import AccountState


class SlotLedger(Protocol):
    """`max_concurrency` counted beyond this worker (proxy/pool/redis_slots.py, across hosts)."""

    def acquire(self, upstream: str, account_id: str, limit: int) -> str | None: ...
    def release(self, token: str) -> None: ...


class LeaseOwner(Protocol):
    """The pool a lease came from (proxy.pool.pool.AccountPool), as the lease sees it."""

    @property
    def slots(self) -> SlotLedger | None: ...
    def _release(self, state: AccountState, failure: str | None, usage: Usage | None, error: str | None) -> None: ...


class Lease:
    """An account held for one attempt; `release` exactly once (extra calls are ignored)."""

    def __init__(self, pool: LeaseOwner, state: AccountState, slot: str | None = None) -> None:
        self._pool = pool
        self.state = state
        self.slot = slot  # the ledger's token, when the account's max_concurrency is counted beyond this worker
        self._released = False

    @property
    def account(self) -> Account:
        return self.state.account

    def release(self, failure: str | None = None, usage: Usage | None = None, error: str | None = None) -> None:
        """`failure` is the attempt's failure class (None: it served); `error` what went wrong, in
        words with no secret in them (the upstream's message, scrubbed), kept as the account's last error."""
        if self._released:
            return
        self._released = True
        self._pool._release(self.state, failure, usage, error)
        if self.slot is not None and self._pool.slots is not None:
            self._pool.slots.release(self.slot)


LEDGER_FULL_FOR = 1.0  # seconds an account the slot ledger refused counts as busy


@dataclass
class Availability:
    """Why no account could be leased, for the 503 message."""

    total: int = 0
    cooling: int = 0
    disabled: int = 0
    busy: int = 0
    proxies_cooling: int = 0  # in rotation but for their outbound proxies, all cooling
    next_back: float | None = None  # seconds until the soonest cooling account (or proxy) returns
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def throttled(self) -> bool | None:
        """True when every account not disabled is cooling or at max_concurrency (and there is one):
        throttled, not broken. False when an account is out for another reason (disabled only, or
        its outbound proxies all cooling); None when the upstream has no account that could serve
        and none is throttled either (so it neither makes nor spoils a 429 on its own)."""
        serving = self.total - self.disabled
        if serving <= 0:
            return None
        return self.proxies_cooling == 0 and self.cooling + self.busy == serving
