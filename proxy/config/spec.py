"""The config file's keys described once: `SPEC`, every key with its type (as a JSON Schema
fragment), default and meaning, in the order the reference page gives them.

Owns the description only; `proxy.config.reference` makes the Markdown reference and the JSON Schema
from it, and tests/test_config_reference.py holds it to the loader (`proxy.config.load` and its
siblings): at every section the keys listed are exactly the keys the loader knows, and each default
stated is the one the loader applies. A key added to the loader is added here, or that test fails.
Import-light: stdlib only, like `proxy.config`.
"""

from __future__ import annotations

from proxy.config.limits import LIMIT_NAMES
from proxy.config.model import MAX_TOKENS_FIELDS, PROMPT_CACHE_MODES, REASONING_CONTROLS, TOOL_SCHEMAS
from proxy.config.money_spec import BUDGET, MONEY_TOP_LEVEL, PRICING, PROVIDER
from proxy.config.observability import LOG_FORMATS
from proxy.config.observability_spec import REQUEST_LOG, TRACING
from proxy.config.pool import ACTIONS, POLICIES
from proxy.config.presets import PRESETS
from proxy.config.routing_spec import FALLBACK_TOP_LEVEL, UPSTREAM_WEIGHT
from proxy.config.spec_parts import (
    BOOLEAN,
    ENV,
    SIZE,
    STRING,
    Key,
    Schema,
    Section,
    number,
    one_of,
    one_or_list,
    string_map,
)
from proxy.config.spec_parts import key as _k
from proxy.config.state import BACKENDS
from proxy.config.unsupported import UNREMOVABLE

__all__ = ["ENV", "SPEC", "STRING", "Key", "Schema", "Section"]
LIMITS = Section(tuple(
    _k(name, number(1, whole=True), meaning) for name, meaning in zip(LIMIT_NAMES, (
        "Requests this key may start per minute.",
        "Input (cached included) and output tokens per minute, as the upstream reports them.",
        "Tokens per UTC day.",
        "Tokens per UTC calendar month.",
        "Requests in flight at once (a stream counts until it ends).",
    ), strict=True)))

CLIENT_KEY = Section((
    _k("name", STRING, "Shown in logs, usage and metrics instead of the key: 1 to 64 letters, digits or "
                       "`. _ @ : -`, unique, not the key itself.", "—", required=True),
    _k("key", STRING, "The secret the client presents (`Authorization: Bearer` or `x-api-key`), compared in "
                      "constant time. Put it in the environment: `${CLIENT_KEY_ALICE}`.", "—", required=True),
    _k("models", one_or_list(STRING), "Glob patterns of the models this key may use; any other model gets a 403 "
                                      "naming it.", "every model"),
    _k("disabled", BOOLEAN, "A disabled key gets 401.", "false"),
    _k("limits", LIMITS, "What this key may use, across every worker and host; over a limit: 429 with "
                         "`Retry-After`. Each limit is optional, a whole number ≥ 1; at least one must be set. "
                         "See [Operating it](operating.md#client-key-limits)."),
    _k("budget", BUDGET, "US dollars this key may spend, held exactly across every worker and host: a request "
                         "reserves its worst case first and is refused (OpenAI protocols 429 `insufficient_quota`, "
                         "Anthropic 400) when that would not fit. See [Money](money.md#budgets)."),
), or_string="a key alone; its name in logs is `key-` and a hash prefix")

ADMIN_KEY = Section((
    _k("name", STRING, "Shown in logs and the audit trail instead of the key: 1 to 64 letters, digits or "
                       "`. _ @ : -`, unique.", "—", required=True),
    _k("key", STRING, "The secret presented for `/admin/` and `/metrics` (`${ADMIN_KEY_OPS}`).", "—", required=True),
    _k("role", one_of(("admin", "viewer")), "`admin` may change things; `viewer` may only read `/admin/` (GET), "
                                        "`/metrics` and the status page.", "admin"),
), or_string="a key alone, role admin; its name is `key-` and a hash prefix")

ACCOUNT = Section((
    _k("id", STRING, "The account's name in logs, the admin API and the status page; unique within the "
                     "upstream.", "—", required=True),
    _k("api_key", STRING, "The upstream's API key for this account (`${UPSTREAM_KEY_1}`).", "—", required=True),
    _k("weight", number(0), "Share of traffic under `pool.policy: weighted`.", "1",
       applies=("upstreams.0.accounts.0.weight", 1.0)),
    _k("balance", number(), "Starting balance for `pool.policy: balance` (refreshed if `pool.balance` is set)."),
    _k("proxy", one_or_list(STRING), "This account's outbound proxy URL, or a list tried in order (see "
                                     "[Configuration](configuration.md#outbound-proxies)); overrides the top-level "
                                     "`proxies`.", "the top-level `proxies`"),
    _k("max_concurrency", number(1, whole=True), "Attempts in flight at once on this account: per worker with the "
                                                 "SQLite backend, across every host with `state.backend: redis`.",
       "no limit"),
))

MODELS = Section((
    _k("preset", one_of(tuple(PRESETS)), "Start from a ready-made table of aliases, renames and prefixes "
                                         "(proxy/config/presets.py); the entries given here win."),
    _k("serve", one_or_list(STRING), "Glob patterns of the client model names this upstream serves. With several "
                                     "upstreams a model's requests go to the upstreams that serve it, in config "
                                     "order.", '`["*"]`', applies=("upstreams.0.models.serve", ("*",))),
    _k("aliases", string_map("client model name → upstream model name"),
       "Client model name → upstream model name; listed in `/v1/models`."),
    _k("renames", string_map("legacy client model name → upstream model name"),
       "Legacy client model names → upstream model name; accepted but not listed."),
    _k("prefixes", string_map("glob pattern → prefix"), "Glob pattern → prefix put before the model name for this "
                                                         "upstream (`\"claude-*\": \"anthropic/\"`)."),
    _k("list_upstream", BOOLEAN, "Include the upstream's own `/models` list in `/v1/models`.", "true",
       applies=("upstreams.0.models.list_upstream", True)),
))


def _timeouts(top_level: bool) -> Section:
    at = "timeouts" if top_level else "upstreams.0.timeouts"
    keys = [
        _k("connect", number(0.001), "Seconds to connect to an upstream.", "10", applies=(f"{at}.connect", 10.0)),
        _k("read", number(0.001), "Seconds a non-streamed request waits for an upstream's response headers (they "
                                  "come once the whole answer is generated), and each read of a non-streamed body.",
           "300", applies=(f"{at}.read", 300.0)),
        _k("first_byte", number(0.001), "Seconds one attempt of a streaming request waits for the upstream's "
                                        "response headers before the next account is tried.",
           "30 (or `read`, if shorter)"),
    ]
    if not top_level:
        return Section(tuple(keys))
    return Section((*keys, _k(
        "first_byte_total", number(0.001),
        "Seconds a streaming request's client waits for its first byte, across all attempts and upstreams: then "
        "it gets a 504 saying what was tried (`upstream 'main': 3 accounts tried, 30s each; no response headers "
        "within 60s in total`). If the upstream's headers came but its first event has not by "
        "then, the client gets the protocol's keepalive (`streaming.idle_timeout` bounds the rest) — or a 504 on "
        "a Responses-to-Responses stream, which has no keepalive before the upstream's first event. Top level "
        "only.", "60", applies=("timeouts.first_byte_total", 60.0))))


REASONING = Section((
    _k("passback", {"anyOf": [{"enum": ["auto"]}, BOOLEAN]},
       "When reasoning from earlier turns goes back as `reasoning_content` (DeepSeek's thinking mode answers 400 "
       "to an assistant tool-call message without it, while other compatible servers may refuse the field). "
       "`auto`: on assistant messages that carry tool calls, the reasoning of that turn when it came from an "
       "OpenAI-compatible upstream (thinking blocks the proxy signed, reasoning items without OpenAI's "
       "`encrypted_content`) — every tool-call turn of the history, in every request; Anthropic's or OpenAI's "
       "own thinking never goes. `true`: every assistant "
       "message's readable reasoning, whatever produced it, and an empty `reasoning_content` on a tool-call "
       "message that has none (for a strict backend serving a history another model made). `false`: never (for "
       "a server that refuses the field).", "auto", applies=("upstreams.0.reasoning.passback", "auto")),
    _k("control", one_of(REASONING_CONTROLS),
       "(OpenAI-compatible upstreams only.) How a client's request for reasoning is spelled for this upstream: "
       "`reasoning_effort` (OpenAI; a thinking budget maps to low ≤ 2048 < medium ≤ 8192 < high), `deepseek` "
       "(`thinking: {type}`), `qwen` (`enable_thinking`, `thinking_budget`), `openrouter` (`reasoning: {effort}` or "
       "`reasoning: {max_tokens}`), or `none` (removed).", "none", applies=("upstreams.0.reasoning.control", "none")),
))

RULE = Section((
    _k("status", one_or_list(number(100, whole=True)), "The status (or list of statuses) the rule applies to.",
       "any status"),
    _k("match", STRING, "A regular expression searched in the error body, case-insensitive.", "any body"),
    _k("class", STRING, "The class the failure is given (logs, metrics, the account's reason).", "—",
       required=True),
    _k("action", one_of(ACTIONS), "`fail` (the error goes to the client), `next` (next account), `cool` (rest "
                                  "this account, next one) or `disable` (take it out until a probe succeeds).", "—",
       required=True),
))

PROBE = Section((
    _k("method", one_of(("GET", "POST", "HEAD")), "The probe's HTTP method.", "GET",
       applies=("upstreams.0.pool.probe.method", "GET")),
    _k("path", STRING, "Path under `base_url` asked with the account's key.", "/models",
       applies=("upstreams.0.pool.probe.path", "/models")),
    _k("interval", number(0.05), "Seconds between probes of a disabled account.", "30",
       applies=("upstreams.0.pool.probe.interval", 30.0)),
))

BALANCE = Section((
    _k("path", STRING, "Path under `base_url` that answers the balance as JSON.", "—", required=True),
    _k("field", STRING, "The JSON field holding it (a dotted path).", "—", required=True),
    _k("method", one_of(("GET", "POST")), "HTTP method.", "GET"),
    _k("interval", number(0.05), "Seconds between reads.", "300"),
))

POOL = Section((
    _k("policy", one_of(POLICIES), "How an attempt picks among the accounts in rotation: `lru` (least recently "
                                   "used), `balance` (highest known balance), `round_robin`, `weighted` (random by "
                                   "`weight`).", "lru", applies=("upstreams.0.pool.policy", "lru")),
    _k("max_attempts", number(1, whole=True), "Attempts (accounts tried) per request.", "10",
       applies=("upstreams.0.pool.max_attempts", 10)),
    _k("cooldown", number(0), "Seconds an exhausted account rests when the upstream does not say.", "60",
       applies=("upstreams.0.pool.cooldown", 60.0)),
    _k("rules", RULE, "Failure-classification rules, checked before the built-in ones (see "
                      "[Configuration](configuration.md#the-account-pool)).", listed="list"),
    _k("probe", PROBE, "The cheap request that tells whether a disabled account works again.",
       "`GET /models` every 30 s"),
    _k("balance", BALANCE, "Where each account's balance is read, for `policy: balance`.", "not read"),
    _k("affinity", {"anyOf": [BOOLEAN, {"enum": ["on", "off"]}]},
       "Conversation affinity: a conversation's next turn goes to the account that served its previous turn "
       "while that account is in rotation and below `max_concurrency` (prompt caches are per account). `off` "
       "leaves every turn to `policy`. See [Configuration](configuration.md#the-account-pool).", "on",
       applies=("upstreams.0.pool.affinity", True)),
    _k("affinity_ttl", number(1), "Seconds a conversation's account is remembered after its last turn.", "3600",
       applies=("upstreams.0.pool.affinity_ttl", 3600.0)),
    _k("affinity_header", {"type": "string", "pattern": r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"},
       "A client header that names the conversation (e.g. `X-Session-Id`), checked before what the client's "
       "protocol says."),
))

UPSTREAM = Section((
    _k("name", STRING, "The upstream's name in logs, metrics and the admin API; unique.", "—", required=True),
    _k("protocol", STRING, "The protocol it speaks: `chat_completions` (OpenAI-compatible), `messages` "
                           "(Anthropic) or `responses` (OpenAI Responses), or one a `protocol_plugins` module "
                           "registers.", "—", required=True),
    _k("base_url", {"type": "string", "pattern": r"^(https?://[^/\s]+|\$\{)"},
       "`http://` or `https://` URL the protocol's paths go under (e.g. `https://api.openai.com/v1`).", "—",
       required=True),
    _k("accounts", ACCOUNT, "The pool of accounts (API keys) requests are spread over.", "—", required=True,
       listed="list"),
    _k("models", MODELS, "Routing and renaming of model names.", "serve everything, no renames"),
    _k("headers", {"type": "object", "additionalProperties": {"type": "string"}},
       "Extra headers sent with every request to this upstream."),
    _k("timeouts", _timeouts(top_level=False), "This upstream's own `connect`, `read` and `first_byte`, over the "
                                               "top-level `timeouts`.", "the top-level `timeouts`"),
    _k("stream_usage", BOOLEAN, "Ask the upstream for usage in streams (for accounting).", "true",
       applies=("upstreams.0.stream_usage", True)),
    _k("reasoning", REASONING, "How reasoning travels to an OpenAI-compatible upstream."),
    _k("max_output_tokens", number(1, whole=True),
       "Clamp on the client's `max_tokens` (Claude Code asks for 32000+). For `messages` upstreams, which require "
       "`max_tokens`, also the value sent when the client gave none (else 4096)."),
    _k("max_tokens_field", one_of(MAX_TOKENS_FIELDS), "Which field carries it: `max_tokens` or "
                                                      "`max_completion_tokens` (OpenAI reasoning models).",
       "max_tokens", applies=("upstreams.0.max_tokens_field", "max_tokens")),
    _k("pool", POOL, "Selection policy, retries, failure rules, probes, balance refresh and affinity.",
       "see its keys"),
    _k("unsupported", {"type": "array", "items": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$",
                                                  "not": {"enum": list(UNREMOVABLE)}}},
       "Request fields this upstream rejects, removed from every request to it, passthrough and translated "
       "alike; `cache_control` also wherever Anthropic puts it. Other names are removed at the top level only. "
       f"{', '.join(f'`{n}`' for n in UNREMOVABLE)} cannot be listed. The first request that carried a listed field "
       "logs one `info` line naming the upstream and the field (once per field, upstream and worker)."),
    _k("prompt_cache", {"anyOf": [{"enum": [*PROMPT_CACHE_MODES, False]}, ENV]},
       "Prompt caching the proxy asks a `messages` (Anthropic) upstream for when the client's request carries no "
       "`cache_control` anywhere: `auto` sets Anthropic's automatic caching (the top-level `cache_control`), "
       "`breakpoints` marks the last system block and the last block of the final message (for "
       "Anthropic-compatible servers that do not know the top-level field), `off` adds nothing. A request with "
       "`cache_control` of its own is never touched, and nothing is added where `unsupported` lists "
       "`cache_control`. Other protocols' upstreams ignore it. See "
       "[Configuration](configuration.md#prompt-caching).", "auto",
       applies=("upstreams.0.prompt_cache", "auto")),
    _k("tool_schema", one_of(TOOL_SCHEMAS),
       "How tools' parameter schemas go to a `gemini` upstream: `json_schema` sends the client's JSON Schema as "
       "it is (`parametersJsonSchema`); `openapi` reduces it to the OpenAPI subset of the older `parameters` "
       "field (no `$ref`, `additionalProperties`, `const`, type lists, …), for Gemini-compatible servers that "
       "refuse the rest. Other protocols' upstreams ignore it.", "json_schema",
       applies=("upstreams.0.tool_schema", "json_schema")),
    PROVIDER,
    _k("pricing", PRICING, "This upstream's own prices, over the top-level `pricing`."),
    UPSTREAM_WEIGHT,
))

SENTINEL = Section((
    _k("hosts", {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": r"^.+:\d+$"}},
       'The sentinels, as `"host:port"`.', "—", required=True),
    _k("service_name", STRING, "The name the sentinels monitor the primary by (their `sentinel monitor NAME …` "
                               "line).", "—", required=True),
    _k("password", STRING, "The primary's (and replicas') password, from the environment."),
    _k("sentinel_password", STRING, "The sentinels' own password, if they have one."),
    _k("db", number(0, whole=True), "Redis database number.", "0"),
    _k("tls", BOOLEAN, "TLS to the sentinels and the primary.", "false"),
))

STATE = Section((
    _k("backend", one_of(BACKENDS), "Where the state workers and hosts share lives: `sqlite` (the `state_path` "
                                    "file: one host) or `redis` (several hosts sharing one pool; see "
                                    "[Several hosts](several-hosts.md)). Cannot change on a reload.", "sqlite",
       applies=("state.backend", "sqlite")),
    _k("url", {"type": "string", "pattern": r"^(redis|rediss|unix)://|\$\{"},
       "With `redis`: `redis://[user:password@]host:port/db`, `rediss://…` for TLS, or `unix:///path/redis.sock`; "
       "a password from the environment. Never shown whole.", "— (required with `redis`, unless `sentinel`)"),
    _k("prefix", STRING, "Put before every Redis key, so several proxies can share one Redis.", "`llm-proxy:`",
       applies=("state.prefix", "llm-proxy:")),
    _k("sentinel", SENTINEL, "Instead of `url`: a Redis primary found and followed through Redis Sentinel."),
))

SPEC = Section((
    _k("client_keys", CLIENT_KEY, "Keys clients may present (`Authorization: Bearer` or `x-api-key`), compared in "
                                  "constant time: plain strings, or named entries that may be restricted to models, "
                                  "disabled, or limited. Logs and usage show the name (a plain string's is `key-` "
                                  "and a hash prefix), never the key.", "—", required=True,
       listed="list_or_one"),
    _k("admin_keys", ADMIN_KEY,
       "Keys for `/admin/` (the admin API and the status page) and `GET /metrics`; without any, the admin API "
       "and the status page are off. A `viewer` may only read (GET); an `admin` may change things too. See "
       "[Keys](keys.md).", listed="list_or_one"),
    _k("upstreams", UPSTREAM, "The backends requests go to, each with its pool of accounts.", "—", required=True,
       listed="list"),
    _k("proxies", one_or_list(STRING), "Outbound proxy URLs (tried in order) for every account that names none of "
                                       "its own: `http://`, `https://`, `socks5://` or `socks5h://`, "
                                       "`scheme://[user:password@]host:port`; SOCKS needs "
                                       "`pip install 'llm-proxy[socks]'`.", "direct"),
    _k("timeouts", _timeouts(top_level=True), "Timeouts for every upstream (each may override `connect`, `read` "
                                              "and `first_byte`)."),
    _k("streaming", Section((
        _k("keepalive_interval", number(0.01), "Seconds of upstream silence before the client gets a keepalive "
                                               "(`: keepalive` comment on OpenAI-protocol streams).", "10",
           applies=("streaming.keepalive_interval", 10.0)),
        _k("idle_timeout", number(0.01), "Seconds of upstream silence that end a stream with an in-band error and "
                                         "the protocol's terminator.", "300",
           applies=("streaming.idle_timeout", 300.0)),
        _k("queue_size", number(1, whole=True), "Deprecated and without effect (a stream reads the upstream only "
                                                "after the client's socket took the previous frames); a config that "
                                                "sets it gets one warning line.", "—"),
    )), "Keepalives and the idle deadline of streams."),
    _k("max_body_bytes", SIZE, "Largest request body (413 beyond); also `\"32MiB\"`.", "32 MiB",
       applies=("max_body_bytes", 32 * 2**20)),
    _k("max_response_bytes", SIZE, "Largest non-streamed upstream answer (502 beyond, rather than buffering it).",
       "64 MiB", applies=("max_response_bytes", 64 * 2**20)),
    _k("model_list_ttl", number(0), "Seconds each upstream's model list is cached for `/v1/models`.", "300",
       applies=("model_list_ttl", 300.0)),
    _k("response_store", Section((
        _k("max_entries", number(0, whole=True), "Responses kept.", "1000",
           applies=("response_store.max_entries", 1000)),
        _k("ttl", number(1), "Seconds a stored response stays retrievable.", "86400",
           applies=("response_store.ttl", 86400.0)),
    )), "Responses kept for `previous_response_id`, `item_reference` and `GET /v1/responses/{id}` (in memory, "
        "per worker; in Redis, shared by every host, with `state.backend: redis`)."),
    _k("compaction", Section((
        _k("key", {"anyOf": [{"type": "string", "minLength": 32}, ENV]},
           "The secret (at least 32 characters, e.g. `${LLM_PROXY_COMPACTION_KEY}`) that seals the summaries the "
           "proxy makes when it compacts a conversation. Unset: generated once into `compaction.key` beside "
           "`state_path` (mode 0600), shared by every worker and restart; with `state_path: null`, in memory "
           "only. Changing it makes the compaction items clients hold unreadable (400).", "generated"),
    )), "Compaction of conversations on upstreams that cannot compact."),
    _k("trust_env", BOOLEAN, "Let outbound requests use `HTTP(S)_PROXY` / `NO_PROXY` from the environment.",
       "false", applies=("trust_env", False)),
    _k("log_level", {"anyOf": [{"enum": ["debug", "info", "warning", "error"]}, ENV]}, "How much is logged.",
       "info", applies=("log_level", "info")),
    _k("state_path", {"type": ["string", "null"]},
       "SQLite file (relative to the working directory) holding account states, counters, usage and accounts "
       "added at runtime; shared by the workers of a host. gunicorn's control socket is created beside it "
       "(`<state_path>.ctl`). `null` keeps state in memory (one worker, lost on restart). Cannot change on a "
       "reload.", "`llm-proxy-state.db`", applies=("state_path", "llm-proxy-state.db")),
    _k("state", STATE, "Where the shared state lives: the `state_path` file, or Redis."),
    _k("server", Section((
        _k("forwarded_allow_ips", one_or_list(STRING, non_empty=False),
           "Peers (addresses or CIDR networks, or `\"*\"` for any) whose `X-Forwarded-For` / `X-Forwarded-Proto` "
           "are believed: for such a peer the client's address in the access log is the rightmost forwarded hop "
           "that is not itself trusted; `[]` trusts no peer. A comma-separated string is also accepted. See "
           "[Deploying](deploying.md). Cannot change on a reload.", "`[127.0.0.1, \"::1\"]`",
           applies=("server.forwarded_allow_ips", ("127.0.0.1", "::1"))),
        _k("tls", Section((
            _k("certfile", STRING, "The certificate chain, PEM; must exist and be readable.", "—", required=True),
            _k("keyfile", STRING, "Its private key, PEM; must exist and be readable.", "—", required=True),
        )), "HTTPS on the proxy's own socket (gunicorn's `certfile` / `keyfile`); omit for plain HTTP. Cannot "
            "change on a reload."),
    )), "How the proxy's own socket is served: which fronts are trusted, and TLS."),
    _k("metrics", Section((
        _k("enabled", BOOLEAN, "Count requests, attempts, tokens and timings for `GET /metrics`; `false` saves that "
                               "work on every request and `/metrics` answers 404. Cannot change on a reload.",
           "true", applies=("metrics.enabled", True)),
        _k("public", BOOLEAN, "Serve `GET /metrics` without a key (otherwise it needs an admin key).", "false",
           applies=("metrics.public", False)),
    )), "Prometheus metrics."),
    _k("logging", Section((
        _k("format", one_of(LOG_FORMATS), "`text`, or `json`: every line the server writes is one JSON object. "
                                          "Cannot change on a reload.", "text", applies=("logging.format", "text")),
    )), "How log lines are written."),
    _k("usage", Section((
        _k("enabled", BOOLEAN, "Account every request for `GET /admin/usage` and `/admin/requests`; `false` saves "
                               "one state write per request, and both answer 404. Cannot change on a reload.",
           "true", applies=("usage.enabled", True)),
        _k("retention_days", number(1, whole=True), "Days the per-minute usage figures are kept.", "90",
           applies=("usage.retention_days", 90)),
    )), "Usage accounting."),
    _k("request_log", REQUEST_LOG, "The request log: requests kept with their bodies, bounded, in a SQLite file "
       "beside `state_path` (or in Redis with `state.backend: redis`)."),
    _k("tracing", TRACING, "OpenTelemetry traces of every request, in the GenAI semantic conventions."),
    _k("keys", Section((
        _k("prefix", {"anyOf": [{"type": "string", "pattern": r"^[A-Za-z0-9._-]{1,16}$"}, ENV]},
           "What the secret of a key made at runtime starts with (1 to 16 letters, digits or `. _ -`): "
           "recognisable in logs and by secret scanners.", "`sk-`", applies=("keys.prefix", "sk-")),
        _k("pepper", {"anyOf": [{"type": "string", "minLength": 32}, ENV]},
           "The install's secret (at least 32 characters, e.g. `${LLM_PROXY_KEYS_PEPPER}`) that runtime keys are "
           "stored under: only an HMAC of each secret with it is kept. Unset: generated once — into "
           "`<state_path>.pepper` (mode 0600), or into Redis with `state.backend: redis`, the same for every host; "
           "with `state_path: null`, in memory only. Changing it makes every runtime key stop working.",
           "generated", applies=("keys.pepper", None)),
    )), "Keys made at runtime through the admin API and `llm-proxy keys`."),
    _k("audit", Section((
        _k("retention_days", number(1, whole=True), "Days the audit trail of admin changes (`GET /admin/audit`) is "
                                                    "kept; older entries are dropped.", "365",
           applies=("audit.retention_days", 365)),
    )), "The audit trail of changes made through the admin API and `llm-proxy keys`."),
    _k("protocol_plugins", {"type": "array", "items": {"type": "string",
                                                       "pattern": r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"}},
       "Python modules imported at start, each registering one more protocol — its client endpoint and its "
       "`protocol:` value (docs/architecture.md §4.6). Cannot change on a reload."),
    *MONEY_TOP_LEVEL,
    *FALLBACK_TOP_LEVEL,
))
