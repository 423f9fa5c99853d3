"""How much a budgeted request reserves: the most it could cost, over every upstream it may go to.

Owns the worst case (proxy.money.cost.worst_case_micros) of one request:
- input: the proxy's estimate of its input tokens (proxy.ir.tokens, the figure count_tokens
  gives) * (1 + `budget_input_margin`), rounded up;
- priced at the highest input-class price that may apply: the cache-write prices too where the
  request may be cached — the client marked something `cache_control`, or the upstream adds its own
  breakpoints (`prompt_cache`, on unless `off`; for a model without a cache-write price the class
  falls back to `input`, so this costs nothing there);
- plus the output cap at the output price (none, nor a cache-write price, for a request priced
  by its input alone: embeddings): the client's max_tokens (max_tokens /
  max_completion_tokens / max_output_tokens, the IR's `max_tokens`), else the upstream's
  `max_output_tokens`, else `budget_default_max_output_tokens` (genai-prices has no maximum
  output per model to fall back on);
- the maximum over the routes the model resolves to (proxy.routing: the relay may fall back to
  any of them), each priced under the name that upstream knows the model by.
A route with no price is listed apart: refused under `pricing.unknown: refuse`, left out of the
amount under `allow`. Pure.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from proxy.config.money import BudgetSettings
from proxy.ir.request import Request, TextPart
from proxy.money.cost import worst_case_micros
from proxy.money.prices import PriceBook
from proxy.routing import Route


@dataclass
class Sizing:
    amount: int = 0  # micro-dollars: the worst case over the priced routes
    unpriced: list[Route] = field(default_factory=list)  # routes whose model has no price


def asks_to_cache(req: Request | None, body: dict[str, Any]) -> bool:
    """Whether the client marked anything for the upstream's prompt cache."""
    if "cache_control" in body:
        return True
    if req is None:
        return False
    return (any(t.cache_control for t in req.tools)
            or any(isinstance(p, TextPart) and p.cache_control for m in req.messages for p in m.parts))


@functools.cache
def _factor(margin: float) -> Decimal:
    return 1 + Decimal(str(margin))  # exact: 10 * 1.1 is 11, not 11.000000000000002


def size(routes: Sequence[Route], book: PriceBook, settings: BudgetSettings, input_tokens: int,
         req: Request | None, body: dict[str, Any], input_only: bool = False) -> Sizing:
    found = Sizing()
    tokens = math.ceil(input_tokens * _factor(settings.input_margin))
    client_cap = req.max_tokens if req is not None else None
    client_caches = asks_to_cache(req, body)
    for route in routes:
        upstream = route.upstream
        price = book.price(upstream.name, route.model)
        if price is None:
            found.unpriced.append(route)
            continue
        cap = 0 if input_only else client_cap or upstream.max_output_tokens or settings.default_max_output_tokens
        caching = not input_only and (client_caches or upstream.prompt_cache != "off")
        found.amount = max(found.amount, worst_case_micros(price, tokens, cap, caching))
    return found
