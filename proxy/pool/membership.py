"""Which accounts a pool has: the config file's, and the overlay of accounts added or removed at
runtime through the admin API.

Owns the rule between the two. The file decides which accounts exist; the overlay changes that
until the file is read again by a reload, and no longer:

- a reload brings back every account of the file that was deleted at runtime;
- an id the overlay added and the file now defines becomes the file's (the file wins);
- an account the file no longer lists goes, unless the overlay added it;
- the overlay's own additions stay.

A restart keeps the overlay as it is (it lives in the store, docs/architecture.md §8.4), like every
other account state. Also owns how a runtime-added account is kept in the store (`runtime_config`,
its config with its key) and read back.

Pure data: called under the pool's lock, does no IO, imports neither Flask, requests nor gevent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.config import Account
from proxy.pool.state import AccountState


def reconcile(accounts: tuple[Account, ...], states: dict[str, AccountState], runtime: dict[str, dict[str, Any]],
              removed: set[str]) -> tuple[set[str], set[str]]:
    """Make `states` the file's `accounts` plus the overlay's additions (`runtime`), in place.
    Returns (ids whose stored record must change, ids dropped because the file no longer lists
    them). An account kept keeps its state, counters and in-flight count; one whose key changed
    starts afresh as `active`, since what was learnt of the old key says nothing of the new."""
    changed: set[str] = set()
    for account in accounts:
        state = states.get(account.id)
        if state is None:  # new in the file, or deleted at runtime: the file brings it (back)
            states[account.id] = AccountState(account, balance=account.balance)
            changed.add(account.id)
        elif account.id in runtime or state.account != account:
            if state.account.api_key != account.api_key:
                state.enable()
            state.account = account
            changed.add(account.id)
        runtime.pop(account.id, None)
        removed.discard(account.id)
    listed = {a.id for a in accounts}
    dropped = {i for i in states if i not in listed and i not in runtime}
    for account_id in dropped:
        del states[account_id]  # a lease still out on it ends on the state it holds
    return changed, dropped


def removed_from_file(accounts: tuple[Account, ...], removed: set[str]) -> list[str]:
    """The file's accounts deleted at runtime, in file order (the overlay's removals)."""
    return [a.id for a in accounts if a.id in removed]


def runtime_config(account: Account) -> dict[str, Any]:
    return {"id": account.id, "api_key": account.api_key, "weight": account.weight, "balance": account.balance,
            "proxy": list(account.proxies) or None, "max_concurrency": account.max_concurrency}


def account_from_runtime(config: Mapping[str, Any]) -> Account:
    proxy = config.get("proxy") or ()
    return Account(id=str(config["id"]), api_key=str(config["api_key"]), weight=float(config.get("weight") or 1.0),
                   balance=config.get("balance"), proxies=(proxy,) if isinstance(proxy, str) else tuple(proxy),
                   max_concurrency=config.get("max_concurrency"))
