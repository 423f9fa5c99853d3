"""Usage accounting: every finished request adds to its minute's figures in the state store.

Owns what a request counts for: one request; one error unless its outcome is `ok` or
`client_gone` (a client that hangs up — Claude Code's Esc, a closed tab — chose to; it is no
failure of the proxy or its upstream, and the outcome dimension still shows it); the tokens the
upstream reported, so far as it did for a stream cut short (input, including cached; output,
including reasoning — the IR's convention, docs/architecture.md §3.2 — cached reads, cache
writes, reasoning); its time to first byte and duration. Filed under the minute it arrived, its client
key's name (never the key), protocol, model as the client asked and as the upstream was asked,
upstream, account, stream or not, outcome, status, the price table its cost came from, the
endpoint the client called (its protocol's name for a completion endpoint, when the edge named none)
and the client model that answered (the model asked for, unless a fallback answered). Its cost
(proxy.money.costing sets it on the record first): the micro-dollars where the price is known, and
one request of unknown cost where the upstream reported tokens but the model has no price; what its
cache reads saved. A request that got no upstream (refused,
invalid) is counted with those left empty.

The figures are written before the client has the end of its answer (proxy/ops/usage_writer.py),
so they are exact across workers and restarts; reading them is proxy/blueprints/usage.py's.
"""

from __future__ import annotations

from proxy.ops.hooks import Hooks
from proxy.ops.records import CLIENT_GONE, OK, RequestRecord
from proxy.ops.usage_store import UsageRow
from proxy.ops.usage_writer import UsageWriter


class UsageAccounting(Hooks):
    def __init__(self, writer: UsageWriter) -> None:
        self.writer = writer

    def request_done(self, record: RequestRecord) -> None:
        self.writer.add(usage=usage_row(record), wait=True)


def usage_row(record: RequestRecord) -> UsageRow:
    usage = record.usage
    first_byte = milliseconds(record.first_byte_s)
    started = int(record.started)
    return UsageRow(
        minute=started - started % 60,
        client_key=record.client_key, client_protocol=record.client_protocol, model=record.model,
        upstream_model=record.upstream_model or "", upstream=record.upstream or "", account=record.account or "",
        stream=record.stream, outcome=record.outcome, status=record.status, price_version=record.price_source or "",
        endpoint=record.endpoint or record.client_protocol, served_model=record.served_model or record.model,
        requests=1, errors=int(record.outcome not in (OK, CLIENT_GONE)),
        input_tokens=usage.input_tokens if usage else 0, output_tokens=usage.output_tokens if usage else 0,
        cached_tokens=usage.cache_read_tokens if usage else 0,
        cache_write_tokens=usage.cache_write_tokens if usage else 0,
        reasoning_tokens=usage.reasoning_tokens if usage else 0,
        cost_micros=record.cost_micros or 0, cost_unknown_requests=int(record.cost_micros is None and billed(record)),
        cache_saved_micros=record.cache_saved_micros or 0,
        first_byte_ms_sum=first_byte or 0, first_byte_count=int(first_byte is not None),
        duration_ms_sum=milliseconds(record.duration_s) or 0,
    )


def billed(record: RequestRecord) -> bool:
    """Whether the request has usage to pay for: tokens the upstream reported."""
    usage = record.usage
    return usage is not None and (usage.input_tokens > 0 or usage.output_tokens > 0)


def milliseconds(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)
