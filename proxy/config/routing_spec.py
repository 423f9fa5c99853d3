"""The reference entries (proxy/config/spec.py) of the keys that choose where a request goes
besides each upstream's `models:`: an upstream's `weight`, and the top-level fallbacks and their
bounds (parsed by proxy/config/fallbacks.py)."""

from __future__ import annotations

from proxy.config.fallbacks import DEFAULT_MAX_ATTEMPTS_TOTAL
from proxy.config.spec_parts import ENV, STRING, Key, Schema, number
from proxy.config.spec_parts import key as _k

CHAINS: Schema = {"type": "object", "additionalProperties": {"anyOf": [STRING, {"type": "array", "items": STRING,
                                                                                "minItems": 1}, ENV]}}

UPSTREAM_WEIGHT = _k(
    "weight", number(0),
    "This upstream's share of a model's first attempts among the upstreams that serve the model (3 and 1: three "
    "requests in four start here); its accounts are then chosen by its `pool`. `0`: tried only once every other "
    "upstream of the model failed. With every weight left at 1 the upstreams are tried in config order. See "
    "[Routing](routing.md#weights).", "1", applies=("upstreams.0.weight", 1.0))

FALLBACK_TOP_LEVEL: tuple[Key, ...] = (
    _k("fallbacks", CHAINS,
       "Client model (glob) → the client models tried, in order, when every route of it failed in a way another "
       "model could fix: every account exhausted, rate-limited, disabled or busy, the upstream unreachable or "
       "overloaded, or the model refused as unknown. Never on the client's own 400, a key's limit or budget. "
       "Bounded by `max_attempts_total` and `fallbacks_max_cost_ratio`. See [Routing](routing.md#fallbacks).",
       "none"),
    _k("context_window_fallbacks", CHAINS,
       "The same shape as `fallbacks`: the models tried when an upstream refuses the prompt as too long for the "
       "model (a larger-context model).", "none"),
    _k("max_attempts_total", number(1, whole=True),
       "Upstream calls one request may make in all — across accounts, upstreams and fallback models. Each "
       "upstream's `pool.max_attempts` still bounds its own share.", str(DEFAULT_MAX_ATTEMPTS_TOTAL),
       applies=("fallbacks.max_attempts_total", DEFAULT_MAX_ATTEMPTS_TOTAL)),
    _k("fallbacks_max_cost_ratio", number(0.0001),
       "Skip a fallback whose output price is more than this many times the requested model's (on the routes "
       "each resolves to, the highest price). With a ratio set, a fallback whose price or the model's is "
       "unknown is skipped too.", "no bound", applies=("fallbacks.max_cost_ratio", None)),
)
