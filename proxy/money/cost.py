"""What a request cost, and the most it could cost: integer micro-dollars from usage and a price.

Owns the arithmetic. Usage arrives in the IR's convention (docs/architecture.md §3.2), which the
protocol decoders normalise to: `input_tokens` is every prompt token, cached reads and cache
writes included (OpenAI's `prompt_tokens` already is; Anthropic's `input_tokens` is only the
uncached part, so its decoder adds `cache_read_input_tokens` and `cache_creation_input_tokens`);
`output_tokens` includes reasoning (OpenAI's `reasoning_tokens` and Anthropic's thinking are part
of it), so reasoning is billed once, as output. The cost is then
    uncached input * input + cache reads * cached_input + cache writes * cache_write (the 1-hour
    part * cache_write_1h) + output * output,
each price in USD per million tokens, which makes each product micro-dollars; the sum is rounded
half up to a whole micro-dollar once per request. The worst case (what a budget reserves) is the
input estimate at the highest input-class price that may apply plus the output cap at the output
price, rounded up. Pure.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

from proxy.ir.response import Usage
from proxy.money.prices import Price


def cost_micros(usage: Usage, price: Price) -> int:
    """The request's cost in micro-dollars."""
    rates = price.rates(usage.input_tokens)
    write_1h = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
    total = (usage.uncached_input_tokens * rates.input
             + usage.cache_read_tokens * rates.cached_input
             + (usage.cache_write_tokens - write_1h) * rates.cache_write
             + write_1h * rates.cache_write_1h
             + usage.output_tokens * rates.output)
    return int(total.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def cache_saving_micros(usage: Usage, price: Price) -> int:
    """What reading from the cache saved: cached tokens * (input - cached_input), in micro-dollars."""
    rates = price.rates(usage.input_tokens)
    saved = usage.cache_read_tokens * (rates.input - rates.cached_input)
    return int(saved.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def worst_case_micros(price: Price, input_tokens: int, max_output_tokens: int, caching: bool) -> int:
    """The most a request with this many input tokens (the estimate, margin included) and this output
    cap can cost: every input token at the highest input-class price that may apply — the cache-write
    prices too where the request asks the upstream to cache — and every output token."""
    rates = price.rates(input_tokens)
    input_rate = max(rates.input, rates.cached_input,
                     *((rates.cache_write, rates.cache_write_1h) if caching else ()))
    return math.ceil(input_tokens * input_rate + max_output_tokens * rates.output)
