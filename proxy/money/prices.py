"""Which price is in force for a model on an upstream, and where it came from.

Owns the price table: pydantic's genai-prices (pinned; its version goes with every cost figure so
costs can be recomputed), looked up in the price list of the upstream's provider — `provider:`
in its config, else guessed from its `base_url` (genai-prices knows each provider's API address);
an upstream on a private or unknown address has no provider, so only the config's prices apply
to it (a self-hosted server serving `deepseek-chat` does not charge DeepSeek's prices). Over it,
the config's `pricing.models` globs — the upstream's own first, then the top level's; the first
matching glob wins — set any price class; a class left out comes from genai-prices, and a cache
class still unknown falls back to `input`. A model with neither input nor output price known has
no price (`None`): its requests are served and their cost recorded as unknown, never as 0.

Prices are USD per million tokens, as `Decimal`: a price * a token count is micro-dollars,
exactly. Tiers by prompt size (a model that charges more above 200k input tokens) follow
genai-prices' rule: the whole request pays the tier its input tokens (cached included) exceed.
Lookups are cached per upstream, model and UTC day (genai-prices dates some price changes).
Pure: no Flask, requests or gevent; the table is read from the package, never fetched.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import time
from dataclasses import dataclass
from decimal import Decimal
from fnmatch import fnmatchcase
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from proxy.config.model import Config, Upstream
from proxy.config.money import PRICE_CLASSES, ModelPrice, Pricing

# genai-prices' name of each class (`<name>_mtok`)
_TABLE_NAMES = {"input": "input_mtok", "output": "output_mtok", "cached_input": "cache_read_mtok",
                "cache_write": "cache_write_mtok", "cache_write_1h": "cache_write_1h_mtok"}
CONFIG = "config"


@dataclass(frozen=True, slots=True)
class Rates:
    """One tier's prices, USD per million tokens (= micro-dollars per token)."""

    input: Decimal
    output: Decimal
    cached_input: Decimal
    cache_write: Decimal
    cache_write_1h: Decimal


@dataclass(frozen=True, slots=True)
class Price:
    """The price in force for one model on one upstream."""

    model: str  # the upstream's model name it was looked up by
    tiers: tuple[tuple[int, Rates], ...]  # (input tokens a request must exceed, its rates), ascending; first at 0
    source: str  # where it came from: "genai-prices 0.2.3", "config", or "config + genai-prices 0.2.3"
    provider: str | None  # the price list it was looked up in
    table_model: str | None = None  # genai-prices' id of the model, when it gave any class

    def rates(self, input_tokens: int) -> Rates:
        """The rates a request with this many input tokens (cached included) pays, all of it."""
        chosen = self.tiers[0][1]
        for start, rates in self.tiers[1:]:
            if input_tokens > start:
                chosen = rates
        return chosen


def table_version() -> str:
    """genai-prices' version, as every cost figure records it."""
    return f"genai-prices {_genai().__version__}"


@cache
def _genai() -> Any:
    import genai_prices  # deferred: its table takes ~0.1 s to load, which `check-config` need not pay

    return genai_prices


class PriceBook:
    """The prices of one config. Build a new one when the config changes."""

    def __init__(self, config: Config) -> None:
        self._top = config.pricing
        self._upstreams = {u.name: u for u in config.upstreams}
        self._cache: dict[tuple[str, str, int], Price | None] = {}

    def provider(self, upstream: Upstream) -> str | None:
        """The price list the upstream's model names are looked up in (None: config prices only)."""
        if upstream.provider is not None:
            return upstream.provider
        return None if private_address(upstream.base_url) else guess_provider(upstream.base_url)

    def warm(self) -> None:
        """Load genai-prices' table now if any upstream may need it (a provider set, or a public
        address to guess one from): at a worker's start, rather than on the first request's end,
        where its ~0.2 s of CPU would stall every request of the worker."""
        if any(u.provider is not None or not private_address(u.base_url) for u in self._upstreams.values()):
            _genai().data_snapshot.get_snapshot()

    def unknown_allowed(self, upstream_name: str) -> bool:
        """Whether a budgeted key may run a model with no price on this upstream (`pricing.unknown`)."""
        upstream = self._upstreams.get(upstream_name)
        said = upstream.pricing.unknown if upstream is not None else None
        return (said or self._top.unknown or "refuse") == "allow"

    def price(self, upstream_name: str, model: str) -> Price | None:
        """The price for `model` (the upstream's name for it) on the upstream, or None if unknown."""
        day = int(time.time() // 86400)
        key = (upstream_name, model, day)
        if key not in self._cache:
            if len(self._cache) > 10_000:  # model names come from clients: keep the cache bounded
                self._cache.clear()
            self._cache[key] = self._look_up(upstream_name, model)
        return self._cache[key]

    def _look_up(self, upstream_name: str, model: str) -> Price | None:
        upstream = self._upstreams.get(upstream_name)
        override = _configured(upstream.pricing if upstream else Pricing(), model) or _configured(self._top, model)
        provider = self.provider(upstream) if upstream is not None else None
        table = _table_prices(provider, model) if provider else None
        classes: dict[str, Any] = {}  # class → Decimal or genai-prices' TieredPrices
        from_config = from_table = False
        for name in PRICE_CLASSES:
            mine = getattr(override, name) if override is not None else None
            theirs = table[1].get(name) if table is not None else None
            if mine is not None:
                classes[name], from_config = mine, True
            elif theirs is not None:
                classes[name], from_table = theirs, True
        if "input" not in classes or "output" not in classes:
            return None
        source = " + ".join([*([CONFIG] if from_config else []), *([table_version()] if from_table else [])])
        return Price(model=model, tiers=_tiers(classes), source=source, provider=provider,
                     table_model=table[0] if table is not None and from_table else None)


def _configured(pricing: Pricing, model: str) -> ModelPrice | None:
    return next((prices for glob, prices in pricing.models if fnmatchcase(model, glob)), None)


def _table_prices(provider: str, model: str) -> tuple[str, dict[str, Any]] | None:
    """genai-prices' model id and prices by class for `model` in `provider`'s list, or None."""
    snapshot = _genai().data_snapshot.get_snapshot()
    try:
        _, info = snapshot.find_provider_model(model, None, provider, None)
    except LookupError:
        return None
    prices = info.get_prices(dt.datetime.now(dt.UTC))
    found = {name: value for name in PRICE_CLASSES if (value := getattr(prices, _TABLE_NAMES[name], None)) is not None}
    return str(info.id), found


def _tiers(classes: dict[str, Any]) -> tuple[tuple[int, Rates], ...]:
    """Flat and tiered classes → one Rates per tier start (a flat class is the same in every tier)."""
    starts = sorted({0} | {t.start for v in classes.values() if not isinstance(v, Decimal) for t in v.tiers})

    def at(value: Any, start: int) -> Decimal:
        if isinstance(value, Decimal):
            return value
        applicable = value.base
        for tier in value.tiers:  # ascending
            if start >= tier.start:
                applicable = tier.price
        return Decimal(applicable)

    tiers = []
    for start in starts:
        rate = {name: at(value, start) for name, value in classes.items()}
        for cache_class in ("cached_input", "cache_write", "cache_write_1h"):
            rate.setdefault(cache_class, rate["input"])
        tiers.append((start, Rates(**rate)))
    return tuple(tiers)


def private_address(base_url: str) -> bool:
    """A loopback, private or link-local address, or localhost: no provider's API (genai-prices
    knows none there), so no price list — and no need to load the table to find that out."""
    host = urlsplit(base_url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_private or address.is_loopback or address.is_link_local


def guess_provider(base_url: str) -> str | None:
    """genai-prices' provider whose API address `base_url` is, or None (a private or unknown server)."""
    snapshot = _genai().data_snapshot.get_snapshot()
    try:
        return str(snapshot.find_provider(None, None, base_url).id)
    except LookupError:
        return None
