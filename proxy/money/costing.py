"""The `Costing` hook: what each request cost, put on its record before any other hook hears of it.

Owns `RequestRecord.cost_micros`, `.price_source` and `.cache_saved_micros` (proxy/ops/records.py).
When a request ends, the price in force for the model the upstream was asked for, on that upstream
(`PriceBook.price`, proxy/money/prices.py), turns the usage the upstream reported into integer
micro-dollars (`cost_micros`, proxy/money/cost.py) and what its cache reads saved. No usage (the
request never reached an upstream, or the upstream reported none) or no price: `cost_micros` stays
None — unknown, never 0 — and, with usage, the request counts as one of unknown cost.

It must be the first hook of the `HookSet` (proxy/serving/app.py puts it there): usage accounting,
metrics, the recent-requests list and budgets read what it sets. The price book is the config's:
`book()` gives the one of the config served now, so a reload's prices apply from then on (a request
in flight is priced when it ends, at the prices then in force). Cheap: the book caches lookups.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.money.cost import cache_saving_micros, cost_micros
from proxy.money.prices import PriceBook
from proxy.ops.hooks import Hooks
from proxy.ops.records import RequestRecord


class Costing(Hooks):
    def __init__(self, book: Callable[[], PriceBook]) -> None:
        self.book = book

    def request_done(self, record: RequestRecord) -> None:
        price_record(record, self.book())


def price_record(record: RequestRecord, book: PriceBook) -> None:
    """Set the record's cost, its price's source and the cache saving (left None if unknown)."""
    usage = record.usage
    if usage is None or not record.upstream or not record.upstream_model:
        return
    price = book.price(record.upstream, record.upstream_model)
    if price is None:
        return
    record.cost_micros = cost_micros(usage, price)
    record.cache_saved_micros = cache_saving_micros(usage, price)
    record.price_source = price.source
