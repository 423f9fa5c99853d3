"""The recent-requests list behind the status page: the last requests this host finished, shared
by its workers, without bodies and without keys.

Owns what an entry says (request id, arrival, key name, client address, protocol, endpoint, models
— as asked, as sent upstream, and the model that served when a fallback did —, upstream, account,
stream, status, outcome, attempts, first byte, duration, tokens, cost) and its JSON form for
`GET /admin/requests`. Entries go to the store with the next usage commit rather than a commit of
their own (`wait=False`, proxy/ops/usage_writer.py): wired before usage accounting, a request's
entry and its usage land in the same transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from proxy.ops.hooks import Hooks
from proxy.ops.records import RequestRecord
from proxy.ops.usage import milliseconds
from proxy.ops.usage_store import RecentEntry
from proxy.ops.usage_writer import UsageWriter


class RecentRequests(Hooks):
    def __init__(self, writer: UsageWriter) -> None:
        self.writer = writer

    def request_done(self, record: RequestRecord) -> None:
        self.writer.add(recent=recent_entry(record), wait=False)


def recent_entry(record: RequestRecord) -> RecentEntry:
    usage = record.usage
    return RecentEntry(
        request_id=record.request_id, time=record.started, client_key=record.client_key,
        client_protocol=record.client_protocol, model=record.model, upstream_model=record.upstream_model,
        upstream=record.upstream, account=record.account, stream=record.stream, status=record.status,
        outcome=record.outcome, attempts=record.attempts, first_byte_ms=milliseconds(record.first_byte_s),
        duration_ms=milliseconds(record.duration_s), input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0, client_address=record.client_address,
        cost_micros=record.cost_micros, endpoint=record.endpoint or record.client_protocol,
        served_model=record.served_model)


def entry_json(entry: RecentEntry) -> dict[str, Any]:
    return {"request_id": entry.request_id, "time": iso_time(entry.time, milliseconds=True),
            "client_key": entry.client_key, "client_protocol": entry.client_protocol,
            "endpoint": entry.endpoint or entry.client_protocol,  # an entry from before: its protocol's
            "model": entry.model, "served_model": entry.served_model,
            "upstream_model": entry.upstream_model, "upstream": entry.upstream, "account": entry.account,
            "stream": entry.stream, "status": entry.status, "outcome": entry.outcome, "attempts": entry.attempts,
            "first_byte_ms": entry.first_byte_ms, "duration_ms": entry.duration_ms,
            "input_tokens": entry.input_tokens, "output_tokens": entry.output_tokens,
            "client_address": entry.client_address, "cost_usd": usd(entry.cost_micros)}


def usd(micros: int | None) -> float | None:
    """Micro-dollars as dollars, exact to the micro-dollar: the integer sum, divided once (its
    shortest decimal form has at most six decimals: 11340 → 0.01134)."""
    return None if micros is None else float(Decimal(micros).scaleb(-6))


def iso_time(epoch: float, milliseconds: bool = False) -> str:
    """ISO 8601 in UTC with a Z: 2025-01-31T12:00:00Z (or …:00.123Z)."""
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.isoformat(timespec="milliseconds" if milliseconds else "seconds").replace("+00:00", "Z")
