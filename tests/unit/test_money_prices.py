"""Prices and cost (proxy/money/prices.py, proxy/money/cost.py): genai-prices' own figures for real
models of three providers, config overrides, unknown models, tiers, and the worst case."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import genai_prices
import pytest

from proxy.config.load import parse
from proxy.ir.response import Usage
from proxy.money.cost import cache_saving_micros, cost_micros, worst_case_micros
from proxy.money.prices import PriceBook, guess_provider, table_version
from tests.unit.test_config import MINIMAL


def book(provider: str | None = None, **extra: Any) -> tuple[PriceBook, str]:
    doc = copy.deepcopy(MINIMAL)
    if provider:
        doc["upstreams"][0]["provider"] = provider
    upstream_pricing = extra.pop("upstream_pricing", None)
    if upstream_pricing:
        doc["upstreams"][0]["pricing"] = upstream_pricing
    doc.update(extra)
    config = parse(doc, environ={})
    return PriceBook(config), config.upstreams[0].name


USAGE = Usage(input_tokens=12_345, output_tokens=2_222, cache_read_tokens=4_000, cache_write_tokens=1_500,
              reasoning_tokens=700)


def genai_micros(usage: Usage, model: str, provider: str) -> Decimal:
    """genai-prices' own total for the usage, in micro-dollars (its usage counts input with caches)."""
    calc = genai_prices.calc_price(genai_prices.Usage(
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens),
        model, provider_id=provider)
    return calc.total_price * 1_000_000


@pytest.mark.parametrize(("provider", "model"), [
    ("anthropic", "claude-sonnet-4-5-20250929"),
    ("openai", "gpt-5"),
    ("deepseek", "deepseek-chat"),
    ("openrouter", "anthropic/claude-sonnet-4.5"),
])
def test_the_cost_is_genai_prices_figure_for_real_models(provider: str, model: str) -> None:
    prices, upstream = book(provider)
    price = prices.price(upstream, model)
    assert price is not None and price.source == table_version() and price.provider == provider
    usage = USAGE if provider in ("anthropic", "openrouter") else Usage(
        input_tokens=USAGE.input_tokens, output_tokens=USAGE.output_tokens, cache_read_tokens=4_000,
        reasoning_tokens=700)  # OpenAI-style providers bill no cache writes
    expected = genai_micros(usage, model, provider)
    assert cost_micros(usage, price) == int(expected.quantize(Decimal(1)))
    assert cost_micros(usage, price) > 0


def test_reasoning_is_billed_once_as_output() -> None:
    prices, upstream = book("openai")
    price = prices.price(upstream, "gpt-5")
    assert price is not None
    with_reasoning = Usage(input_tokens=1000, output_tokens=800, reasoning_tokens=600)
    without = Usage(input_tokens=1000, output_tokens=800)
    assert cost_micros(with_reasoning, price) == cost_micros(without, price) == 1000 * 1.25 + 800 * 10


def test_a_prompt_above_the_tier_pays_the_tier_rate_for_all_of_it() -> None:
    prices, upstream = book("anthropic")
    price = prices.price(upstream, "claude-sonnet-4-5-20250929")
    assert price is not None
    assert cost_micros(Usage(input_tokens=200_000, output_tokens=0), price) == 200_000 * 3
    assert cost_micros(Usage(input_tokens=200_001, output_tokens=10), price) == 200_001 * 6 + int(10 * 22.5)


def test_an_override_wins_and_a_missing_class_falls_back() -> None:
    prices, upstream = book("openai", pricing={"models": {"gpt-5*": {"output": 20}}})
    price = prices.price(upstream, "gpt-5")
    assert price is not None and price.source == f"config + {table_version()}"
    rates = price.rates(10)
    assert (rates.input, rates.output, rates.cached_input) == (Decimal("1.25"), Decimal(20), Decimal("0.125"))


def test_the_upstreams_own_pricing_wins_over_the_top_level() -> None:
    prices, upstream = book(None, pricing={"models": {"llama-*": {"input": 1, "output": 2}}},
                            upstream_pricing={"models": {"llama-3*": {"input": "0.5", "output": 1}}})
    three = prices.price(upstream, "llama-3-70b")
    two = prices.price(upstream, "llama-2")
    assert three is not None and two is not None
    assert three.rates(0).input == Decimal("0.5") and three.source == "config"
    assert two.rates(0).input == Decimal(1)
    assert two.rates(0).cache_write == Decimal(1)  # a cache class left out falls back to input


def test_an_unknown_model_has_no_price_and_a_private_upstream_no_provider() -> None:
    prices, upstream = book("openai")
    assert prices.price(upstream, "no-such-model-anywhere") is None
    private, name = book(None)
    assert private.price(name, "gpt-5") is None  # 127.0.0.1: only the config's prices apply
    assert not private.unknown_allowed(name)
    allowing, name = book(None, pricing={"unknown": "allow"})
    assert allowing.unknown_allowed(name)


@pytest.mark.parametrize(("url", "provider"), [
    ("https://api.anthropic.com", "anthropic"), ("https://api.openai.com/v1", "openai"),
    ("https://openrouter.ai/api/v1", "openrouter"), ("https://api.deepseek.com", "deepseek"),
    ("http://127.0.0.1:8000/v1", None), ("https://llm.internal.example", None),
])
def test_the_provider_is_guessed_from_the_base_url(url: str, provider: str | None) -> None:
    assert guess_provider(url) == provider


def test_the_worst_case_takes_the_highest_input_price_and_the_whole_output_cap() -> None:
    prices, upstream = book("anthropic")
    price = prices.price(upstream, "claude-sonnet-4-5-20250929")
    assert price is not None
    assert worst_case_micros(price, 1000, 100, caching=False) == 1000 * 3 + 100 * 15
    assert worst_case_micros(price, 1000, 100, caching=True) == 1000 * 6 + 100 * 15  # the 1-hour write price
    assert worst_case_micros(price, 1000, 100, caching=True) >= cost_micros(
        Usage(input_tokens=1000, output_tokens=100, cache_write_tokens=1000, cache_write_1h_tokens=1000), price)


def test_the_cache_saving_is_cached_tokens_times_the_difference() -> None:
    prices, upstream = book("anthropic")
    price = prices.price(upstream, "claude-sonnet-4-5-20250929")
    assert price is not None
    assert cache_saving_micros(Usage(input_tokens=5000, cache_read_tokens=4000), price) == int(4000 * (3 - 0.3))
