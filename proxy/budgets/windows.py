"""What a budget means, apart from where its figures live: the subjects a request falls under, the
UTC calendar periods, the lines a reservation takes, and the words of a refusal.

Owns
- subjects: `key:<name>` for a client key's own budget, `group:<name>` for each key group the key
  is in (every one of them must allow the request);
- periods: `usd_per_day` counts in the UTC calendar day (`d<days since the epoch>`), `usd_per_month`
  in the UTC calendar month (`m<year*12+month-1>`), `usd_total` for ever (`total`); a request is
  charged in the period it was admitted in, even if it ends after midnight;
- `Line`: one (subject, window, period, limit, amount) a request reserves; `Charge`: what a request
  that ended owes its lines (its real cost, in place of its holds);
- the refusal's message: who (the key, or the group and the key in it), which window and its limit,
  what is spent and reserved by requests in flight, what this one may cost, and when the window
  resets (UTC).
Amounts are integer micro-dollars. Pure.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from proxy.config.keys import ClientKey
from proxy.config.model import Config
from proxy.config.money import BUDGET_WINDOWS, MICROS_PER_USD, Budget

DAY, MONTH, TOTAL = BUDGET_WINDOWS  # usd_per_day, usd_per_month, usd_total
KEY, GROUP = "key", "group"
WORDS = {DAY: "a UTC day", MONTH: "a UTC month", TOTAL: "in total"}


@dataclass(frozen=True, slots=True)
class Subject:
    """Something with a budget: a client key, or a group of keys."""

    kind: str  # key | group
    name: str
    budget: Budget

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.name}"


class Line(NamedTuple):
    """What one request reserves against one window of one subject's budget. (A named tuple: a
    request makes one per window, and its first three fields are the figure it touches.)"""

    subject: str  # Subject.id
    window: str  # usd_per_day | usd_per_month | usd_total
    period: str  # which day, month, or "total"
    limit: int  # micro-dollars
    amount: int  # micro-dollars


@dataclass(frozen=True, slots=True)
class Refusal:
    """The line that would have gone over, with the figures the store saw."""

    line: Line
    spent: int
    reserved: int


class Charge(NamedTuple):
    """A request that ended: its holds (`lease`, on `lines`) to be replaced by what it cost."""

    lines: tuple[Line, ...]
    lease: str
    cost: int  # micro-dollars


LineId = tuple[str, str, str]  # (subject, window, period): one figure of the store


def line_id(line: Line) -> LineId:
    return line[:3]  # subject, window, period


def subjects(config: Config, entry: ClientKey) -> list[Subject]:
    """Every budget the key's requests fall under: its own, then its groups' in config order."""
    found = [Subject(KEY, entry.name, entry.budget)] if entry.budget is not None else []
    found += [Subject(GROUP, g.name, g.budget) for g in config.key_groups
              if g.budget is not None and entry.name in g.keys]
    return found


def period(window: str, now: float) -> str:
    day = int(now // 86400)
    cached = _periods.get((window, day))
    if cached is None:
        cached = _periods[(window, day)] = _period(window, now)
        if len(_periods) > 64:  # a few days' worth: old ones are never asked again
            _periods.pop(next(iter(_periods)))
    return cached


_periods: dict[tuple[str, int], str] = {}  # (window, UTC day) → period: every request asks, a day answers


def _period(window: str, now: float) -> str:
    if window == DAY:
        return f"d{int(now // 86400)}"
    if window == MONTH:
        t = dt.datetime.fromtimestamp(now, dt.UTC)
        return f"m{t.year * 12 + t.month - 1}"
    return "total"


def resets_at(window: str, now: float) -> float | None:
    """When the period `now` falls in ends (epoch seconds); None for `usd_total`, which never resets."""
    if window == DAY:
        return (now // 86400 + 1) * 86400
    if window == MONTH:
        t = dt.datetime.fromtimestamp(now, dt.UTC)
        return dt.datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=dt.UTC).timestamp()
    return None


Limit = tuple[str, str, int]  # (subject id, window, limit): what a request's lines are made of


def limits(found: list[Subject]) -> tuple[Limit, ...]:
    return tuple((s.id, window, limit) for s in found for window, limit in s.budget.windows().items())


def lines(found: Sequence[Limit], amount: int, now: float) -> tuple[Line, ...]:
    return tuple([Line(subject, window, period(window, now), limit, amount) for subject, window, limit in found])


def usd(micros: int) -> str:
    """Micro-dollars as people read dollars: $0.004213, $12.50."""
    text = f"{micros / MICROS_PER_USD:.6f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def who(subject: str, key_name: str) -> str:
    kind, _, name = subject.partition(":")
    if kind == KEY:
        return f"The API key {name!r}"
    return f"The key group {name!r} (which the API key {key_name!r} is in)"


def message(refusal: Refusal, key_name: str, now: float) -> str:
    line = refusal.line
    ends = resets_at(line.window, now)
    when = ("it never resets (raise the budget to go on)" if ends is None else
            f"it resets at {dt.datetime.fromtimestamp(ends, dt.UTC):%Y-%m-%dT%H:%M:%SZ} "
            f"(in {_duration(ends - now)})")
    return (f"{who(line.subject, key_name)} would go over its {line.window} budget ({usd(line.limit)} "
            f"{WORDS[line.window]}): {usd(refusal.spent)} spent and {usd(refusal.reserved)} reserved by requests "
            f"in flight, and this request may cost up to {usd(line.amount)}; {when}.")


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {seconds % 60}s"
