"""`GET /admin/usage`'s parameters and answer: from a query string to a `UsageQuery`, and from the
store's figures to JSON or CSV.

Owns the query's rules. `since` / `until`: ISO 8601 (`2025-01-31T12:00:00Z`, `2025-01-31`; no
offset means UTC) or epoch seconds; `until` defaults to now and `since` to a day before it. Figures
are kept per minute, so the window covers whole minutes: `since` is taken down to its minute and
`until` up to its own (so "until now" includes the current minute), and the answer says which
window it covered. `group_by`: a comma-separated list of `DIMENSIONS`; `bucket`: minute, hour or
day (UTC) adds a `time` column; `format`: json or csv. Money is summed in integer micro-dollars and
shown in dollars (`cost_usd`, `cache_saved_usd`: exact to the micro-dollar; six decimals in CSV),
beside `cost_unknown_requests` (requests with usage but no price) and `cache_hit_rate`. Anything
else — an unknown parameter included — is a 400 that says what to write instead.
Pure: must not import Flask, requests or gevent.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from proxy.errors import invalid
from proxy.ops.recent import iso_time, usd
from proxy.ops.usage_store import BUCKETS, COUNTERS, DIMENSIONS, UsageAnswer, UsageQuery

PARAMETERS = ("since", "until", "group_by", "bucket", "format")
DEFAULT_WINDOW = 86400  # seconds before `until` that `since` defaults to
MAX_BUCKETS = 50_000  # time buckets in one answer (a month of minutes fits)
TIME_EXAMPLE = "ISO 8601 such as 2025-01-31T12:00:00Z or 2025-01-31, or epoch seconds such as 1738324800"


def parse_query(args: Mapping[str, str], now: float) -> tuple[UsageQuery, str]:
    """The query and the answer's format, or a 400 naming the parameter at fault."""
    for name in args:
        if name not in PARAMETERS:
            raise invalid(name, f"unknown parameter; /admin/usage takes {', '.join(PARAMETERS)}")
    until = parse_time(args["until"], "until") if args.get("until") else now
    since = parse_time(args["since"], "since") if args.get("since") else until - DEFAULT_WINDOW
    if since >= until:
        raise invalid("since", f"must be earlier than until ({iso_time(since)} is not before {iso_time(until)})")
    start, end = int(since // 60 * 60), int(math.ceil(until / 60) * 60)
    group_by: list[str] = []
    for name in (part.strip() for part in args.get("group_by", "").split(",")):
        if name and name not in DIMENSIONS:
            raise invalid("group_by", f"{name!r} is not something usage is grouped by; use a comma-separated list "
                                      f"of {', '.join(DIMENSIONS)}")
        if name and name not in group_by:
            group_by.append(name)
    bucket = args.get("bucket") or None
    if bucket is not None:
        if bucket not in BUCKETS:
            raise invalid("bucket", f"must be one of {', '.join(BUCKETS)} (got {bucket!r})")
        count = math.ceil(end / BUCKETS[bucket]) - start // BUCKETS[bucket]
        if count > MAX_BUCKETS:
            raise invalid("bucket", f"bucket={bucket} from since to until makes {count} time buckets, more than "
                                    f"{MAX_BUCKETS}: use a larger bucket or a shorter window")
    answer_format = args.get("format") or "json"
    if answer_format not in ("json", "csv"):
        raise invalid("format", f"must be json or csv (got {answer_format!r})")
    return UsageQuery(since=start, until=end, group_by=tuple(group_by), bucket=bucket), answer_format


def parse_time(value: str, name: str) -> float:
    text = value.strip()
    try:
        epoch = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise invalid(name, f"must be {TIME_EXAMPLE} (got {value!r})") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        epoch = moment.timestamp()
    if not math.isfinite(epoch) or epoch < 0 or epoch > 253402300799:  # 9999-12-31T23:59:59Z
        raise invalid(name, f"must be a time between 1970 and 9999: {TIME_EXAMPLE} (got {value!r})")
    return epoch


# The figures an answer shows, in order: the counters, money in dollars instead of micro-dollars.
SHOWN = ("requests", "errors", "input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens",
         "reasoning_tokens", "cost_usd", "cost_unknown_requests", "cache_saved_usd", "cache_hit_rate",
         "avg_first_byte_ms", "avg_duration_ms")
_IN_DOLLARS = {"cost_usd": "cost_micros", "cache_saved_usd": "cache_saved_micros"}


def _averages(figures: Mapping[str, Any]) -> dict[str, Any]:
    """What a row (or the totals) shows: counters; cost and cache saving in dollars, from the exact
    sum of micro-dollars; the cache hit rate (cached ÷ input tokens); average times."""
    counted = figures["first_byte_count"]
    shown = {name: figures[name] for name in COUNTERS if name not in _IN_DOLLARS.values()}
    for name, micros in _IN_DOLLARS.items():
        shown[name] = usd(figures[micros])
    shown["cache_hit_rate"] = round(figures["cached_tokens"] / figures["input_tokens"], 4) \
        if figures["input_tokens"] else None
    return {name: shown[name] for name in SHOWN if name in shown} | {
        "avg_first_byte_ms": round(figures["first_byte_ms_sum"] / counted) if counted else None,
        "avg_duration_ms": round(figures["duration_ms_sum"] / figures["requests"]) if figures["requests"] else None,
    }


def _group(row: Mapping[str, Any], query: UsageQuery) -> dict[str, Any]:
    """A row's group values as the answer shows them: `time` in ISO 8601, an unknown value as null."""
    values: dict[str, Any] = {"time": iso_time(row["time"])} if query.bucket else {}
    for name in query.group_by:
        values[name] = None if row[name] == "" else row[name]
    return values


def answer_json(query: UsageQuery, answer: UsageAnswer) -> dict[str, Any]:
    return {"since": iso_time(query.since), "until": iso_time(query.until), "group_by": list(query.group_by),
            "bucket": query.bucket,
            "rows": [_group(row, query) | _averages(row) for row in answer.rows],
            "totals": _averages(answer.totals)}


def answer_csv(query: UsageQuery, answer: UsageAnswer) -> str:
    """The rows with a header line; an unknown value is an empty cell, booleans are true / false."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    header = [*(["time"] if query.bucket else []), *query.group_by, *SHOWN]
    writer.writerow(header)
    for row in answer.rows:
        shown = _group(row, query) | _averages(row)
        for name, micros in _IN_DOLLARS.items():  # six decimals, as written: 0.011340
            shown[name] = f"{Decimal(row[micros]).scaleb(-6):f}"
        writer.writerow(["" if shown[c] is None else str(shown[c]).lower() if isinstance(shown[c], bool)
                         else shown[c] for c in header])
    return out.getvalue()
