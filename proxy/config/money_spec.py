"""The money keys of the config file described for the reference page and the JSON Schema:
prices, provider, budgets, groups of keys, the reservation's settings and alerts.

Owns the description only (what `proxy.config.money` parses); `proxy.config.spec` places these
sections in the file's tree. Import-light: stdlib only.
"""

from __future__ import annotations

from proxy.config.money import (
    DEFAULT_INPUT_MARGIN,
    DEFAULT_MAX_OUTPUT_TOKENS,
    PRICE_CLASSES,
    UNKNOWN_PRICE,
)
from proxy.config.spec_parts import ENV, STRING, Key, Schema, Section, number, one_of
from proxy.config.spec_parts import key as _k

USD: Schema = {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*$"},
                         ENV]}

PRICING = Section((
    _k("models", {"type": "object", "additionalProperties": {
        "type": "object", "minProperties": 1, "additionalProperties": False,
        "properties": {name: USD for name in PRICE_CLASSES}},
                  "description": "glob over the upstream's model name → prices"},
       "Glob over the model name as the upstream is asked for it (after routing) → prices in USD per million "
       "tokens: `input` (neither read from nor written to a cache), `output` (reasoning included), `cached_input` "
       "(read from the cache), `cache_write` (written to it; Anthropic's 5-minute cache) and `cache_write_1h`. "
       "The first matching glob wins; a class left out comes from genai-prices, then (cache classes) from "
       "`input`. See [Money](money.md#prices)."),
    _k("unknown", one_of(UNKNOWN_PRICE), "A model with no known price, for a key under a budget: `refuse` it (the "
                                         "budget could not be held) or `allow` it (its cost is recorded as "
                                         "unknown). Keys without a budget are always served.", "refuse"),
))

PROVIDER = _k("provider", STRING, "Whose price list this upstream's model names are looked up in (genai-prices' "
                                  "provider id: `anthropic`, `openai`, `openrouter`, `deepseek`, `google`…). Shown in "
                                  "the startup summary.", "guessed from `base_url`; none for a private address")

BUDGET = Section((
    _k("usd_per_day", USD, "US dollars per UTC day."),
    _k("usd_per_month", USD, "US dollars per UTC calendar month."),
    _k("usd_total", USD, "US dollars ever (until the key is given a new budget)."),
    _k("alert_at", number(0.01), "A fraction of each window (0.8: 80 %) at which one warning is logged, "
                                 "`llm_proxy_budget_alerts_total` counts and `alerts.webhook_url` is told."),
))

KEY_GROUP = Section((
    _k("name", STRING, "The group's name in logs, `/admin/keys` and refusals.", "—", required=True),
    _k("keys", {"type": "array", "minItems": 1, "items": STRING}, "The names of its client keys.", "—",
       required=True),
    _k("budget", BUDGET, "What the group's keys may spend together; each request must fit every budget it falls "
                         "under."),
))

MONEY_TOP_LEVEL: tuple[Key, ...] = (
    _k("pricing", PRICING, "Prices over genai-prices', and what to do with a model that has none. Per upstream "
                           "too (`upstreams[].pricing`, winning over this).", "genai-prices alone"),
    _k("key_groups", KEY_GROUP, "Named sets of client keys (a team), each with a budget of its own; a key may be "
                                "in several.", listed="list"),
    _k("budget_input_margin", number(0), "The safety margin on the estimated input tokens a budgeted request "
                                         "reserves (0.1: 10 %).", str(DEFAULT_INPUT_MARGIN),
       applies=("budgets.input_margin", DEFAULT_INPUT_MARGIN)),
    _k("budget_default_max_output_tokens", number(1, whole=True),
       "The output a budgeted request reserves when neither the client's `max_tokens` nor the upstream's "
       "`max_output_tokens` caps it.", str(DEFAULT_MAX_OUTPUT_TOKENS),
       applies=("budgets.default_max_output_tokens", DEFAULT_MAX_OUTPUT_TOKENS)),
    _k("alerts", Section((
        _k("webhook_url", {"type": "string", "pattern": r"^https?://|\$\{"},
           "Receives one JSON POST per budget threshold crossed (retried; never delays a request)."),
    )), "Where budget alerts go besides the log."),
)
