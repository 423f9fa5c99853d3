"""Which fallback models one request may take (`fallbacks:`, `context_window_fallbacks:`): the
edge's part of docs/architecture.md §5.8, given to the relay as its `FallbackGate`.

Owns the three checks a fallback passes before the relay tries it, each with the reason it is
skipped for the log: the client key may use the model (its `models` globs — a fallback never
widens what a key may ask for); its output price (an embeddings model's input price) is at most
`fallbacks_max_cost_ratio` times the requested model's (the highest price over each model's
routes; with a ratio set, an unknown price on either side skips it); and the USD budgets the key
falls under can hold its worst case where that is higher than what the request holds already
(proxy.budgets: `Budgets.extend`), so a fallback never takes a budget past its limit. When the
relay should try which model, and the cap on upstream calls, are the relay's
(proxy/relay/fallbacks.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from proxy.blueprints.state import AppState
from proxy.config.keys import ClientKey
from proxy.config.model import Config
from proxy.ir.request import Request
from proxy.money.prices import PriceBook
from proxy.ops.records import RequestRecord
from proxy.relay.fallbacks import FallbackGate
from proxy.routing import Route


def fallback_gate(state: AppState, config: Config, entry: ClientKey | None, record: RequestRecord,
                  request: Callable[[], Request | None], tokens: Callable[[], int],
                  body: dict[str, Any], input_only: bool = False) -> FallbackGate | None:
    """The gate of a request admitted with `record`; None when the config has no fallbacks.
    `input_only`: priced by its input tokens alone (embeddings), as its budget was."""
    settings = config.fallbacks
    if not settings.fallbacks and not settings.context_window:
        return None
    ratio = settings.max_cost_ratio
    priced = "input" if input_only else "output"  # what the request pays for: embeddings have no output

    def gate(model: str, routes: Sequence[Any]) -> str | None:
        if entry is not None and not entry.allows(model):
            return f"the key {entry.name!r} may not use it"
        if ratio is not None:
            book = state.budgets.book(config)
            asked = _highest_price(book, state.relay.router.resolve(record.model), input_only)
            offered = _highest_price(book, routes, input_only)
            if asked is None or offered is None:
                return "fallbacks_max_cost_ratio is set and the price of one of the two models is unknown"
            if offered > asked * Decimal(str(ratio)):
                return (f"its {priced} price (${offered}/Mtok) is over fallbacks_max_cost_ratio ({ratio:g}) times "
                        f"{record.model!r}'s (${asked}/Mtok)")
        return state.budgets.extend(config, record, routes, request, tokens, body, input_only)

    return gate


def _highest_price(book: PriceBook, routes: Sequence[Route], input_only: bool) -> Decimal | None:
    """The highest output price over `routes` — the input price for a request priced by its input
    alone — in USD per million tokens, the base tier's; None if any route has no price."""
    prices = [book.price(r.upstream.name, r.model) for r in routes]
    if not prices or any(p is None for p in prices):
        return None
    return max((p.tiers[0][1].input if input_only else p.tiers[0][1].output) for p in prices if p is not None)
