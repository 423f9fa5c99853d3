"""The arithmetic of per-key limits, the same whichever store keeps the figures (the Redis store's
Lua script does the same sums; tests hold the two to each other).

Owns what a limit means:
- `requests_per_minute`, `tokens_per_minute`: a bucket that empties continuously at limit/60 a
  second (the rule Anthropic documents for its own limits): a key may spend its minute's budget in a
  burst and gets it back gradually, never twice in one minute as fixed windows allow at their edge.
- `tokens_per_day`, `tokens_per_month`: calendar windows in UTC, reset at midnight and on the 1st.
- `max_concurrent`: requests in flight at once (counted by the store, from its leases).
A request is let in when every limit has room for it — one more request, and its estimated tokens
(its input as the proxy estimates it: the reservation). A request estimated above a whole budget
is let in only when that budget is untouched (otherwise it could never run). When it ends, the
reservation is replaced by what the upstream reported, so a burst overshoots a token limit by no
more than what the requests in flight were underestimated by.

State is a dict: limit name → [used, stamp] (stamp: the bucket's last update, or the window's id).
Pure: no IO, no clock of its own.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from proxy.config.limits import KeyLimits

BUCKETS = ("requests_per_minute", "tokens_per_minute")
WINDOWS = ("tokens_per_day", "tokens_per_month")
TOKEN_LIMITS = ("tokens_per_minute", "tokens_per_day", "tokens_per_month")
UNITS = {"requests_per_minute": "requests a minute", "tokens_per_minute": "tokens a minute",
         "tokens_per_day": "tokens a UTC day", "tokens_per_month": "tokens a UTC month",
         "max_concurrent": "requests at once"}
CONCURRENCY_WAIT = 1.0  # Retry-After for max_concurrent: when a request in flight ends is not known


@dataclass(frozen=True)
class Refusal:
    limit: str  # the config name of the limit reached
    value: int  # its configured value
    wait: float  # seconds until the request would fit

    @property
    def retry_after(self) -> int:
        return max(1, math.ceil(self.wait))


def window_id(name: str, now: float) -> int:
    """Which UTC day (days since the epoch) or month (year * 12 + month - 1) `now` falls in."""
    if name == "tokens_per_day":
        return int(now // 86400)
    t = dt.datetime.fromtimestamp(now, dt.UTC)
    return t.year * 12 + t.month - 1


def window_end(name: str, now: float) -> float:
    """When the window `now` falls in ends (epoch seconds)."""
    if name == "tokens_per_day":
        return (now // 86400 + 1) * 86400
    t = dt.datetime.fromtimestamp(now, dt.UTC)
    first = dt.datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=dt.UTC)
    return first.timestamp()


def used_now(name: str, limit: int, entry: list[float] | None, now: float) -> float:
    """What counts against the limit at `now`."""
    if not entry:
        return 0.0
    used, stamp = entry
    if name in BUCKETS:
        return max(0.0, used - max(0.0, now - stamp) * limit / 60.0)
    return used if int(stamp) == window_id(name, now) else 0.0


def _wait(name: str, limit: int, used: float, cost: float, now: float) -> float:
    if name in BUCKETS:
        return (used + cost - limit) * 60.0 / limit
    return window_end(name, now) - now


def cost_for(name: str, limit: int, tokens: int) -> float:
    """What a request reserves against one limit: one request, or its estimated tokens (no more than
    the whole budget, so a request above it runs when the budget is untouched)."""
    return 1.0 if name == "requests_per_minute" else float(min(tokens, limit))


def check(limits: KeyLimits, state: dict[str, list[float]], in_flight: int, tokens: int,
          now: float) -> Refusal | None:
    """The limit that has no room for the request (the one that frees up last), or None."""
    worst: Refusal | None = None
    for name, limit in limits.items():
        if name == "max_concurrent":
            if in_flight >= limit:
                worst = _later(worst, Refusal(name, limit, CONCURRENCY_WAIT))
            continue
        used = used_now(name, limit, state.get(name), now)
        cost = cost_for(name, limit, tokens)
        if used + cost > limit:
            worst = _later(worst, Refusal(name, limit, _wait(name, limit, used, cost, now)))
    return worst


def _later(a: Refusal | None, b: Refusal) -> Refusal:
    return b if a is None or b.wait > a.wait else a


def reserve(limits: KeyLimits, state: dict[str, list[float]], tokens: int, now: float) -> dict[str, float]:
    """Count the request in (after `check` found room); returns what it reserved against each limit."""
    reserved = {}
    for name, limit in limits.items():
        if name == "max_concurrent":
            continue
        cost = cost_for(name, limit, tokens)
        state[name] = [used_now(name, limit, state.get(name), now) + cost, _stamp(name, now)]
        if name != "requests_per_minute":
            reserved[name] = cost
    return reserved


def settle(limits: KeyLimits, state: dict[str, list[float]], reserved: dict[str, float], tokens: int,
           now: float, reserved_at: float) -> None:
    """Replace a request's token reservations with the `tokens` it used. A reservation made in an
    earlier day or month went with that window; the tokens count in the current one."""
    for name, limit in limits.items():
        if name not in TOKEN_LIMITS:
            continue
        held = reserved.get(name, 0.0)
        if name in WINDOWS and window_id(name, reserved_at) != window_id(name, now):
            held = 0.0
        used = used_now(name, limit, state.get(name), now)
        state[name] = [max(0.0, used + tokens - held), _stamp(name, now)]


def still_owed(limits: KeyLimits, amounts: dict[str, float], at: float, now: float) -> dict[str, float]:
    """What a charge made at `at` on a store standing in for another still weighs at `now`, when it
    is replayed onto that store: a bucket's part has drained by the time since (toward zero, as a
    reservation given back would have); a window's counts only if `now` is still in its window."""
    owed = {}
    for name, limit in limits.items():
        amount = amounts.get(name, 0.0)
        if not amount:
            continue
        if name in BUCKETS:
            drained = max(0.0, now - at) * limit / 60.0
            amount = math.copysign(max(0.0, abs(amount) - drained), amount)
        elif window_id(name, at) != window_id(name, now):
            amount = 0.0
        if amount:
            owed[name] = amount
    return owed


def charge(limits: KeyLimits, state: dict[str, list[float]], amounts: dict[str, float], now: float) -> None:
    """Add `amounts` (a limit name → what to add; negative gives back) to what counts now."""
    for name, limit in limits.items():
        if name in amounts and name != "max_concurrent":
            used = used_now(name, limit, state.get(name), now)
            state[name] = [max(0.0, used + amounts[name]), _stamp(name, now)]


def _stamp(name: str, now: float) -> float:
    return now if name in BUCKETS else float(window_id(name, now))


def status(limits: KeyLimits, state: dict[str, list[float]], in_flight: int, now: float) -> dict[str, dict[str, float]]:
    """Each limit's figures for an operator: the limit, what is used, what remains, and in how many
    seconds it is all back (a bucket empties) or resets (a window ends)."""
    out: dict[str, dict[str, float]] = {}
    for name, limit in limits.items():
        if name == "max_concurrent":
            out[name] = {"limit": limit, "used": in_flight, "remaining": max(0, limit - in_flight)}
            continue
        used = used_now(name, limit, state.get(name), now)
        back = used * 60.0 / limit if name in BUCKETS else window_end(name, now) - now
        out[name] = {"limit": limit, "used": math.ceil(used), "remaining": max(0, math.floor(limit - used)),
                     "resets_in": math.ceil(back) if used > 0 else 0}
    return out


def message(key_name: str, refusal: Refusal) -> str:
    """The 429's words: which key, which limit, when to come back."""
    if refusal.limit == "max_concurrent":
        return (f"The API key {key_name!r} has {refusal.value} requests in flight, its max_concurrent limit; "
                f"send this one when another has finished.")
    return (f"The API key {key_name!r} has reached its {refusal.limit} limit ({refusal.value} "
            f"{UNITS[refusal.limit]}); retry in {refusal.retry_after}s.")
