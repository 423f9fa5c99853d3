"""Selection policies: which available account serves the next attempt.

Owns the choice only, as pure functions over the candidates the pool offers (already filtered to
accounts in rotation, not yet tried for this request, with a free concurrency slot):

  lru          least recently used (the default): spreads load and rests busy keys
  balance      highest known balance first (accounts without a known balance last)
  round_robin  in config order, continuing after the last account chosen
  weighted     random, in proportion to each account's `weight`
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from proxy.pool.state import AccountState


def choose(policy: str, candidates: Sequence[AccountState], order: Sequence[str], last_chosen: str | None,
           rng: random.Random) -> AccountState | None:
    if not candidates:
        return None
    if policy == "balance":
        return max(candidates, key=lambda s: (s.balance is not None, s.balance or 0.0, -s.last_used))
    if policy == "round_robin":
        start = order.index(last_chosen) + 1 if last_chosen in order else 0
        by_id = {s.id: s for s in candidates}
        for offset in range(len(order)):
            chosen = by_id.get(order[(start + offset) % len(order)])
            if chosen is not None:
                return chosen
        return candidates[0]
    if policy == "weighted":
        weights = [max(s.account.weight, 0.0) for s in candidates]
        if sum(weights) <= 0:
            return rng.choice(list(candidates))
        return rng.choices(list(candidates), weights=weights, k=1)[0]
    return min(candidates, key=lambda s: s.last_used)
