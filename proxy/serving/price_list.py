"""`llm-proxy prices --config FILE`: per served model, the price in force and where it came from.

Owns the listing. The models are those a config names — each upstream's `models.serve` entries
that are literal names (no glob), its aliases and renames (a preset's included, already merged
into them) — and those the usage store has seen (model names as the upstreams were asked, over the
retention window), when the store can be read. Each is shown as the upstream is asked for it, with
its price per class in USD per million tokens (the first tier's; a model with tiers by prompt size
says so) and the source: genai-prices with its version, the config, both (class by class), or
unknown — a model with no price is served, and its cost counted as unknown. Before the models, each
upstream's provider: set in the config, guessed from its `base_url`, or none (config prices only).

Loads genai-prices and may open the state store: never imported by gunicorn's master.
"""

from __future__ import annotations

import time
from typing import Any

from proxy.config import Config
from proxy.money.prices import PriceBook, Rates, table_version
from proxy.routing import upstream_model

CLASSES = ("input", "cached_input", "cache_write", "cache_write_1h", "output")
GLOB = set("*?[")


def configured_models(config: Config) -> list[tuple[str, str]]:
    """(upstream, the upstream's model name) for every model name the config spells out."""
    seen: dict[tuple[str, str], None] = {}
    for upstream in config.upstreams:
        rules = upstream.models
        names = [*(n for n in rules.serve if not GLOB & set(n)), *rules.aliases, *rules.renames]
        for name in names:
            model = upstream_model(upstream, name)
            if model is not None:
                seen[(upstream.name, model)] = None
    return list(seen)


def used_models(config: Config) -> list[tuple[str, str]]:
    """(upstream, model) pairs the usage store has figures for, or [] if it cannot be read now."""
    from proxy.ops.usage_store import UsageQuery
    from proxy.serving.state_backend import open_stores

    try:
        usage = open_stores(config).usage
        now = int(time.time())
        since = now - config.usage.retention_days * 86400
        window = UsageQuery(since - since % 60, now - now % 60 + 60, group_by=("upstream", "upstream_model"))
        answer = usage.query(window)
    except Exception:  # no state file yet, Redis away: the config's models are still listed
        return []
    return [(r["upstream"], r["upstream_model"]) for r in answer.rows if r["upstream"] and r["upstream_model"]]


def provider_lines(config: Config, book: PriceBook) -> list[str]:
    lines = []
    for upstream in config.upstreams:
        provider = book.provider(upstream)
        how = ("provider: in the config" if upstream.provider is not None
               else "guessed from base_url" if provider is not None else "")
        lines.append(f"  {upstream.name}: {provider} ({how})" if provider
                     else f"  {upstream.name}: none: config prices only ({upstream.base_url} is no provider "
                          "genai-prices knows; set provider: to use its prices)")
    return lines


def _price(value: Any) -> str:
    return f"{value.normalize():f}"


def listing(config: Config, with_usage: bool = True) -> str:
    book = PriceBook(config)
    models = configured_models(config)
    if with_usage:
        models += [m for m in used_models(config) if m not in models]
    known = {u.name for u in config.upstreams}
    rows = [("UPSTREAM", "MODEL", *(c.upper() for c in CLASSES), "SOURCE")]
    for upstream, model in models:
        if upstream not in known:
            continue  # an upstream the config no longer has
        price = book.price(upstream, model)
        if price is None:
            rows.append((upstream, model, *("-" for _ in CLASSES), "unknown (served; cost counted as unknown)"))
            continue
        rates: Rates = price.tiers[0][1]
        source = price.source + (f" as {price.table_model}" if price.table_model and price.table_model != model else "")
        if len(price.tiers) > 1:
            source += f"; {len(price.tiers)} tiers by prompt size, the first shown"
        rows.append((upstream, model, *(_price(getattr(rates, c)) for c in CLASSES), source))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    table = ["  ".join(cell.ljust(width) for cell, width in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
             for r in rows]
    return "\n".join([f"Prices in USD per million tokens; the table: {table_version()}.", "Providers:",
                      *provider_lines(config, book), "", *table])
