"""What usage figures and the recent-requests list are, and the `UsageStore` interface that keeps
them, with its in-memory implementation (`state_path: null`: one worker, forgotten on restart).
The SQLite store (tables in the `state_path` file, shared by the host's workers) is
proxy/ops/sqlite_usage_store.py, the Redis one proxy/ops/redis_usage_store.py.

Owns persistence and aggregation, not what a request counts as (proxy/ops/usage.py decides that).
Usage is kept per minute: one row per (minute, client key, client protocol, model, upstream model,
upstream, account, stream, outcome, status, price version, endpoint, served model) with its
counters, added to by every request — so the table grows with the variety of traffic, not its
volume. The recent-requests list is capped at `RECENT_CAP` entries. `add` writes a batch of both at
once; a query reads one snapshot, so its rows always add up to its totals. A networked store
(Redis, a database) implements the same methods.
Pure of Flask, requests and gevent.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

RECENT_CAP = 1000  # the recent-requests list keeps this many; /admin/requests shows up to this many
BUCKETS = {"minute": 60, "hour": 3600, "day": 86400}  # UTC: epoch-aligned hours and days are UTC's
DIMENSIONS = ("client_key", "client_protocol", "model", "upstream_model", "upstream", "account", "stream",
              "outcome", "status", "price_version", "endpoint", "served_model")
# Money is counted in integer micro-dollars (so sums are exact); the answers show dollars.
COUNTERS = ("requests", "errors", "input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens",
            "reasoning_tokens", "cost_micros", "cost_unknown_requests", "cache_saved_micros")
TIMINGS = ("first_byte_ms_sum", "first_byte_count", "duration_ms_sum")  # averages are computed from these


@dataclass(slots=True)
class UsageRow:
    """One minute's figures for one combination of dimensions ('' where a dimension is unknown)."""

    minute: int  # epoch seconds of the minute's start (UTC)
    client_key: str
    client_protocol: str
    model: str
    upstream_model: str
    upstream: str
    account: str
    stream: bool
    outcome: str
    status: int
    # The price table the row's costs were computed with ("genai-prices 0.2.3", "config",
    # "config + genai-prices 0.2.3"; '' when no cost is known), so costs can be recomputed.
    price_version: str = ""
    # What the client called (chat_completions, messages, responses, gemini, embeddings,
    # responses_compact) and the client model name that answered (`model` unless a fallback did).
    # A row written before these were kept reads back with the client protocol and the model
    # (`with_defaults`).
    endpoint: str = ""
    served_model: str = ""
    requests: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_micros: int = 0  # the sum of the known costs
    cost_unknown_requests: int = 0  # requests with usage but no price
    cache_saved_micros: int = 0
    first_byte_ms_sum: int = 0
    first_byte_count: int = 0
    duration_ms_sum: int = 0

    def key(self) -> tuple[Any, ...]:
        return (self.minute, self.client_key, self.client_protocol, self.model, self.upstream_model, self.upstream,
                self.account, self.stream, self.outcome, self.status, self.price_version, self.endpoint,
                self.served_model)

    def values(self) -> tuple[Any, ...]:
        """Every field, in order (`dataclasses.astuple` copies deeply: a measurable cost per request)."""
        return (*self.key(), self.requests, self.errors, self.input_tokens, self.output_tokens, self.cached_tokens,
                self.cache_write_tokens, self.reasoning_tokens, self.cost_micros, self.cost_unknown_requests,
                self.cache_saved_micros, self.first_byte_ms_sum, self.first_byte_count,
                self.duration_ms_sum)

    def add(self, other: UsageRow) -> None:
        for name in (*COUNTERS, *TIMINGS):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class RecentEntry:
    """One finished request as the recent-requests list shows it: no body, no key."""

    request_id: str
    time: float  # when it arrived, epoch seconds
    client_key: str
    client_protocol: str
    model: str
    upstream_model: str | None
    upstream: str | None
    account: str | None
    stream: bool
    status: int
    outcome: str
    attempts: int
    first_byte_ms: int | None
    duration_ms: int | None
    input_tokens: int
    output_tokens: int
    client_address: str | None = None  # as the access log shows it; None in entries from before it was kept
    cost_micros: int | None = None  # None: unknown price, no usage, or an entry from before costs were kept
    endpoint: str | None = None  # what the client called; None in entries from before it was kept
    served_model: str | None = None  # the client model name a fallback answered with; None: `model` itself


@dataclass(frozen=True, slots=True)
class UsageQuery:
    since: int  # epoch seconds, on a minute boundary; included
    until: int  # epoch seconds, on a minute boundary; excluded
    group_by: tuple[str, ...] = ()  # among DIMENSIONS
    bucket: str | None = None  # among BUCKETS: rows carry the bucket's start as `time`


@dataclass(slots=True)
class UsageAnswer:
    rows: list[dict[str, Any]]  # group values (and `time`: the bucket's start, epoch seconds), counters, timings
    totals: dict[str, Any]  # counters and timings over the whole window


class UsageStore(Protocol):
    blocking: bool  # True when calls block (run them on a thread)

    def add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry], purge_before: int | None = None) -> None:
        """Add to the minute rows, append to the recent list (capped), and drop minutes older than
        `purge_before` — all or nothing."""

    def try_add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry]) -> bool:
        """`add` without a purge, only if it can be done at once without waiting on anyone (another
        process's write, the network): False, with nothing written, otherwise. A blocking store
        offers it so the common case needs no thread; a store that cannot tell returns False. It
        must not yield to other greenlets (the writer counts on the queue not changing under it),
        so a networked store returns False."""

    def query(self, query: UsageQuery) -> UsageAnswer: ...

    def recent(self, limit: int) -> list[RecentEntry]:
        """The last `limit` requests added, newest first."""


def with_defaults(row: UsageRow) -> UsageRow:
    """`row` with the dimensions a store or an export written before they existed left empty set
    to what they were then (in place): endpoint the client protocol, served model the model."""
    if not row.endpoint:
        row.endpoint = row.client_protocol
    if not row.served_model:
        row.served_model = row.model
    return row


def merged(rows: Sequence[UsageRow]) -> list[UsageRow]:
    """Rows with the same minute and dimensions summed into one (a batch usually repeats a few);
    the rows given are left as they were."""
    out: dict[tuple[Any, ...], UsageRow] = {}
    sums: set[int] = set()  # ids of the rows made here, which may be added to
    for row in rows:
        key = row.key()
        kept = out.get(key)
        if kept is None:
            out[key] = row
            continue
        if id(kept) not in sums:
            kept = out[key] = UsageRow(*kept.values())
            sums.add(id(kept))
        kept.add(row)
    return list(out.values())


class MemoryUsageStore:
    """For `state_path: null`: this worker's figures only, gone on restart. Never blocks."""

    blocking = False

    def __init__(self) -> None:
        self._rows: dict[tuple[Any, ...], UsageRow] = {}
        self._recent: deque[RecentEntry] = deque(maxlen=RECENT_CAP)

    def add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry], purge_before: int | None = None) -> None:
        for row in usage:
            kept = self._rows.get(row.key())
            if kept is None:
                self._rows[row.key()] = UsageRow(*row.values())
            else:
                kept.add(row)
        self._recent.extend(recent)
        if purge_before is not None:
            self._rows = {k: r for k, r in self._rows.items() if r.minute >= purge_before}

    def try_add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry]) -> bool:
        self.add(usage, recent)
        return True

    def query(self, query: UsageQuery) -> UsageAnswer:
        width = BUCKETS[query.bucket] if query.bucket else None
        groups: dict[tuple[Any, ...], dict[str, Any]] = {}
        totals = _zero()
        for row in self._rows.values():
            if not query.since <= row.minute < query.until:
                continue
            values = {d: getattr(row, d) for d in query.group_by}
            if width is not None:
                values = {"time": row.minute - row.minute % width, **values}
            group = groups.setdefault(tuple(values.values()), {**values, **_zero()})
            for name in (*COUNTERS, *TIMINGS):
                group[name] += getattr(row, name)
                totals[name] += getattr(row, name)
        return UsageAnswer(rows=[groups[k] for k in sorted(groups)], totals=totals)

    def recent(self, limit: int) -> list[RecentEntry]:
        return list(itertools.islice(reversed(self._recent), limit))


def _zero() -> dict[str, Any]:
    return dict.fromkeys((*COUNTERS, *TIMINGS), 0)
