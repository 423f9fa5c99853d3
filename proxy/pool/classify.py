"""Failure classification: what an upstream failure says about the account, and what to do next.

Owns the table of (status, body pattern) → (class, action) with the defaults below, extended by
the config's `pool.rules` (checked first), and reading when a rate-limited account may be tried
again from the response headers. Actions:

  fail     return the upstream's error to the client now; another account would fail the same way
  next     try the next account; this one stays in rotation
  cool     take the account out of rotation until its limit resets, then try the next
  disable  take the account out until re-enabled (a probe or an admin), then try the next

Defaults (docs/architecture.md §8.3): a request too large for any account (403
"estimated cost", 413, context-length errors) fails at once; 403 "insufficient tokens / upgrade
your plan / limit reached" tries the next account; 429 and 402 cool the account; 401 disables it;
Anthropic's 529 overloaded tries the next; network failures try the next; anything else fails.
Google's (Gemini's) errors: API_KEY_INVALID (400) and PERMISSION_DENIED (403) disable; a per-day
RESOURCE_EXHAUSTED is exhaustion (cool until midnight Pacific), any other a rate limit (cool for its
retryDelay).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from email.utils import parsedate_to_datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MAX_COOLDOWN = 86400.0  # a reset header further out than a day is not believed


@dataclass(frozen=True)
class Rule:
    statuses: frozenset[int] | None  # None: any status
    pattern: re.Pattern[str] | None  # searched in the error body; None: any body
    klass: str
    action: str

    def matches(self, status: int, body: str) -> bool:
        if self.statuses is not None and status not in self.statuses:
            return False
        return self.pattern is None or bool(self.pattern.search(body))


def rule(statuses: int | Iterable[int] | None, pattern: str | None, klass: str, action: str) -> Rule:
    if isinstance(statuses, int):
        statuses = [statuses]
    return Rule(frozenset(statuses) if statuses is not None else None,
                re.compile(pattern, re.IGNORECASE) if pattern else None, klass, action)


CONTEXT_LENGTH = (r"context[ _.-]?length|context_length_exceeded|maximum context|context window|prompt is too long"
                  r"|too many (input )?tokens|reduce the length")
# Google's APIs (Gemini) say what failed in the body's google.rpc status and details: a bad or
# expired key is a 400 INVALID_ARGUMENT with reason API_KEY_INVALID; a key that may not use the API,
# 403 PERMISSION_DENIED; RESOURCE_EXHAUSTED names the quota — a per-day one is spent until the
# quota's day ends, a per-minute one is a rate limit gone in seconds (RetryInfo.retryDelay).
GOOGLE_KEY_INVALID = r"API_KEY_INVALID|API key not valid|API key expired"
GOOGLE_PER_DAY = r"RESOURCE_EXHAUSTED[\s\S]*PerDay"
DEFAULT_RULES = (
    rule(400, GOOGLE_KEY_INVALID, "auth_invalid", "disable"),
    rule(403, r"PERMISSION_DENIED|API_KEY_SERVICE_BLOCKED|SERVICE_DISABLED", "auth_invalid", "disable"),
    rule(429, GOOGLE_PER_DAY, "exhausted", "cool"),
    rule(429, r"RESOURCE_EXHAUSTED", "rate_limited", "cool"),
    rule(403, r"estimated cost", "request_too_large", "fail"),
    rule(413, None, "request_too_large", "fail"),
    rule((400, 422), CONTEXT_LENGTH, "request_too_large", "fail"),
    rule(403, r"insufficient tokens|upgrade your plan|limit reached", "insufficient_tokens", "next"),
    rule(429, None, "exhausted", "cool"),
    rule(402, None, "exhausted", "cool"),
    rule(401, None, "auth_invalid", "disable"),
    rule(529, None, "overloaded", "next"),
)
OTHER = Rule(None, None, "other", "fail")
NETWORK_CLASS, NETWORK_ACTION = "network", "next"


@dataclass(frozen=True)
class Verdict:
    klass: str
    action: str


class Classifier:
    def __init__(self, extra_rules: Iterable[Rule] = ()) -> None:
        self.rules = (*extra_rules, *DEFAULT_RULES)

    def classify(self, status: int, body: str) -> Verdict:
        for r in self.rules:
            if r.matches(status, body):
                return Verdict(r.klass, r.action)
        return Verdict(OTHER.klass, OTHER.action)


def cooldown_until(headers: Mapping[str, str], now: float, default: float, body: str = "") -> float:
    """When a rate-limited account may serve again: the latest reset any header announces
    (a request limit and a token limit can reset at different times) or the error body does
    (Google's RetryInfo; a per-day quota resets at midnight Pacific time), else now + default."""
    lowered = {k.lower(): v for k, v in headers.items()}
    waits: list[float] = [wait for wait in (_google_wait(body, now),) if wait is not None and wait > 0]
    for name, value in lowered.items():
        wait = None
        if name == "retry-after-ms":
            wait = _float(value, 0.001)
        elif name == "retry-after":
            wait = _float(value) if _float(value) is not None else _http_date(value, now)
        elif name.startswith("x-ratelimit-reset"):  # OpenAI: "1s", "6m0s", "20ms"; others: seconds or epoch
            wait = _duration(value)
            if wait is None:
                number = _float(value)
                wait = number - now if number is not None and number > 1e9 else number
        elif name.startswith("anthropic-ratelimit-") and name.endswith("-reset"):  # RFC 3339
            wait = _iso(value, now)
        if wait is not None and wait > 0:
            waits.append(min(wait, MAX_COOLDOWN))
    return now + (max(waits) if waits else default)


_RETRY_DELAY = re.compile(r'"retryDelay"\s*:\s*"(\d+(?:\.\d+)?)s"')
_PER_DAY = re.compile(GOOGLE_PER_DAY)


def _pacific() -> tzinfo:
    """Where Google's daily API quotas reset, at midnight (standard time when the system has no tz database)."""
    try:
        return ZoneInfo("America/Los_Angeles")
    except ZoneInfoNotFoundError:
        return timezone(timedelta(hours=-8))


PACIFIC = _pacific()


def _google_wait(body: str, now: float) -> float | None:
    """Seconds until a Google quota named in an error body resets: a per-day quota at the next
    midnight Pacific time, else the RetryInfo's `retryDelay`."""
    if not body or "RESOURCE_EXHAUSTED" not in body:
        return None
    if _PER_DAY.search(body):
        local = datetime.fromtimestamp(now, PACIFIC)
        midnight = datetime.combine(local.date() + timedelta(days=1), datetime.min.time(), PACIFIC)
        return midnight.timestamp() - now
    match = _RETRY_DELAY.search(body)
    return float(match.group(1)) if match else None


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?$")


def _duration(value: str) -> float | None:
    match = _DURATION.match(value.strip())
    if not match or not any(match.groups()):
        return None
    h, m, s, ms = (float(g) if g else 0.0 for g in match.groups())
    return h * 3600 + m * 60 + s + ms / 1000


def _float(value: str, scale: float = 1.0) -> float | None:
    try:
        return float(value.strip()) * scale
    except ValueError:
        return None


def _http_date(value: str, now: float) -> float | None:
    try:
        return parsedate_to_datetime(value).timestamp() - now
    except (TypeError, ValueError, IndexError):
        return None


def _iso(value: str, now: float) -> float | None:
    """An RFC 3339 UTC time such as 2026-05-01T12:00:00Z, as seconds from now."""
    try:
        parsed = time.strptime(value.strip()[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return calendar.timegm(parsed) - now
