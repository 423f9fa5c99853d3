"""The money sections of the config: prices, budgets, groups of keys and spend alerts.

Owns the shape and the checks of
- `pricing: {models: {"<glob over the upstream's model name>": {input, output, cached_input,
  cache_write, cache_write_1h}}, unknown: allow | refuse}` at the top level and per upstream
  (`upstreams[].pricing`, the same shape, winning over the top level) — USD per million tokens;
- `upstreams[].provider` (which price list the upstream's model names are looked up in:
  `anthropic`, `openai`, `openrouter`…; guessed from `base_url` when absent, by proxy/money/prices.py);
- `client_keys[].budget` and `key_groups[].budget`: `{usd_per_day, usd_per_month, usd_total,
  alert_at}` (UTC calendar windows);
- `key_groups: [{name, keys: [<client key names>], budget}]`;
- `budget_input_margin` (the safety margin on the estimated input a reservation takes, default
  0.10) and `budget_default_max_output_tokens` (the output a reservation assumes when nothing
  else caps it, default 4096);
- `alerts: {webhook_url}`.
Amounts are kept as `Decimal` (prices) and integer micro-dollars (budgets), never floats: money is
summed exactly. Import-light: stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from proxy.config.values import ConfigError, choice, int_, join, known, mapping, number, required, str_

PRICE_CLASSES = ("input", "output", "cached_input", "cache_write", "cache_write_1h")
UNKNOWN_PRICE = ("allow", "refuse")
BUDGET_WINDOWS = ("usd_per_day", "usd_per_month", "usd_total")
MICROS_PER_USD = 1_000_000
DEFAULT_INPUT_MARGIN = 0.10
DEFAULT_MAX_OUTPUT_TOKENS = 4096
_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}$")


@dataclass(frozen=True)
class ModelPrice:
    """Prices the config sets for models matching one glob; a class left out is None (it falls back
    to genai-prices, then, for the cache classes, to `input`)."""

    input: Decimal | None = None
    output: Decimal | None = None
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    cache_write_1h: Decimal | None = None


@dataclass(frozen=True)
class Pricing:
    models: tuple[tuple[str, ModelPrice], ...] = ()  # (glob, prices), in the config's order: the first match wins
    unknown: str | None = None  # allow | refuse; None: not said here (the default applies)


@dataclass(frozen=True)
class Budget:
    """USD limits, as integer micro-dollars; None where not set."""

    usd_per_day: int | None = None
    usd_per_month: int | None = None
    usd_total: int | None = None
    alert_at: float | None = None  # fraction of a window's budget that logs one warning and sets a metric

    def windows(self) -> dict[str, int]:
        """The windows this budget sets, name → micro-dollars."""
        return {name: value for name in BUDGET_WINDOWS if (value := getattr(self, name)) is not None}


@dataclass(frozen=True)
class KeyGroup:
    name: str
    keys: tuple[str, ...]  # client key names
    budget: Budget | None = None


@dataclass(frozen=True)
class Alerts:
    webhook_url: str | None = field(default=None, repr=False)  # may carry a token in its query


@dataclass(frozen=True)
class BudgetSettings:
    input_margin: float = DEFAULT_INPUT_MARGIN
    default_max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS


def usd(value: Any, path: str) -> Decimal:
    """A non-negative amount of dollars, exactly as written (`0.3`, not 0.29999…)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(path, f"must be a number of US dollars (got {type(value).__name__})")
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise ConfigError(path, f"must be a number of US dollars (got {value!r})") from None
    if not amount.is_finite() or amount < 0:
        raise ConfigError(path, f"must be a number ≥ 0 of US dollars (got {value!r})")
    return amount


def parse_pricing(raw: Any, path: str) -> Pricing:
    section = mapping(raw, path)
    known(section, path, {"models", "unknown"})
    models = mapping(section.get("models"), join(path, "models"))
    entries = []
    for glob, prices in models.items():
        where = join(join(path, "models"), str(glob))
        if not isinstance(glob, str) or not glob.strip():
            raise ConfigError(where, "must be a pattern over the upstream's model name, such as 'my-llama-*'")
        entries.append((glob, _model_price(prices, where)))
    unknown = None if section.get("unknown") is None else choice(section["unknown"], join(path, "unknown"),
                                                                 UNKNOWN_PRICE)
    return Pricing(models=tuple(entries), unknown=unknown)


def _model_price(raw: Any, path: str) -> ModelPrice:
    prices = mapping(raw, path)
    known(prices, path, set(PRICE_CLASSES))
    if not prices:
        raise ConfigError(path, f"must set at least one of {', '.join(PRICE_CLASSES)} (USD per million tokens)")
    return ModelPrice(**{name: usd(value, join(path, name)) for name, value in prices.items()})


def parse_budget(raw: Any, path: str) -> Budget | None:
    if raw is None:
        return None
    section = mapping(raw, path)
    known(section, path, {*BUDGET_WINDOWS, "alert_at"})
    windows = {name: micros(section[name], join(path, name)) for name in BUDGET_WINDOWS
               if section.get(name) is not None}
    if not windows:
        raise ConfigError(path, f"must set at least one of {', '.join(BUDGET_WINDOWS)} (US dollars)")
    alert_at = None if section.get("alert_at") is None else number(section["alert_at"], join(path, "alert_at"),
                                                                   minimum=0.01)
    if alert_at is not None and alert_at >= 1:
        raise ConfigError(join(path, "alert_at"), f"must be a fraction of the budget below 1, such as 0.8 "
                                                  f"(got {alert_at})")
    return Budget(alert_at=alert_at, **windows)


def micros(value: Any, path: str) -> int:
    """Dollars → whole micro-dollars (a budget finer than that is refused rather than rounded)."""
    amount = usd(value, path) * MICROS_PER_USD
    if amount != amount.to_integral_value():
        raise ConfigError(path, f"is finer than a micro-dollar (got {value!r})")
    if amount <= 0:
        raise ConfigError(path, f"must be more than 0 US dollars (got {value!r})")
    return int(amount)


def parse_key_groups(raw: Any, path: str, key_names: set[str]) -> tuple[KeyGroup, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(path, "must be a list of {name, keys, budget} entries")
    groups: list[KeyGroup] = []
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        entry = mapping(item, where)
        known(entry, where, {"name", "keys", "budget"})
        name = str_(required(entry, "name", where), join(where, "name"))
        if not _GROUP_NAME.match(name):
            raise ConfigError(join(where, "name"), f"must be 1 to 64 letters, digits or . _ @ : - (got {name!r})")
        if any(g.name == name for g in groups):
            raise ConfigError(join(where, "name"), f"the name {name!r} is already used by another group")
        members = required(entry, "keys", where)
        if not isinstance(members, list) or not members:
            raise ConfigError(join(where, "keys"), "must be a non-empty list of client key names")
        for j, member in enumerate(members):
            if member not in key_names:
                raise ConfigError(f"{where}.keys[{j}]", f"no client key is named {member!r} (a group lists the "
                                                        "keys' names, never the keys)")
        groups.append(KeyGroup(name=name, keys=tuple(members), budget=parse_budget(entry.get("budget"),
                                                                                     join(where, "budget"))))
    return tuple(groups)


def parse_alerts(raw: Any, path: str) -> Alerts:
    section = mapping(raw, path)
    known(section, path, {"webhook_url"})
    url = section.get("webhook_url")
    if url is None:
        return Alerts()
    url = str_(url, join(path, "webhook_url"))
    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(join(path, "webhook_url"), "must be an http:// or https:// URL")
    return Alerts(webhook_url=url)


def parse_budget_settings(top: dict[str, Any]) -> BudgetSettings:
    margin = number(top.get("budget_input_margin", DEFAULT_INPUT_MARGIN), "budget_input_margin", minimum=0)
    if margin > 10:
        raise ConfigError("budget_input_margin", f"is a fraction of the estimate (0.1 is 10 %); got {margin}")
    return BudgetSettings(
        input_margin=margin,
        default_max_output_tokens=int_(top.get("budget_default_max_output_tokens", DEFAULT_MAX_OUTPUT_TOKENS),
                                       "budget_default_max_output_tokens", minimum=1))
