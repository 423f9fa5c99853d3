"""The validated configuration as frozen dataclasses: what every other module receives.

Owns the shape of a config and its defaults; `proxy.config.load` builds it from YAML and checks
every value. Import-light (stdlib only), like the rest of `proxy.config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from proxy.config.fallbacks import FallbackSettings
from proxy.config.keys import AuditSettings, ClientKey, KeysSettings
from proxy.config.money import Alerts, BudgetSettings, KeyGroup, Pricing
from proxy.config.observability import LoggingConfig, MetricsConfig
from proxy.config.pool import PoolConfig
from proxy.config.request_log import RequestLogConfig
from proxy.config.server import ServerConfig
from proxy.config.state import StateConfig
from proxy.config.tracing import TracingConfig
from proxy.config.usage import UsageConfig

DEFAULT_FIRST_BYTE = 30.0  # a streaming attempt's wait for response headers, unless `read` is shorter


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0  # TCP + TLS handshake with the upstream
    read: float = 300.0  # waiting for response headers, and each read of a non-stream body
    # A streaming attempt's wait for response headers; None: DEFAULT_FIRST_BYTE, or `read` if shorter
    # (a stream's headers come before any generation, so a long wait means a stuck upstream).
    first_byte: float | None = None
    # A streaming request's whole wait for its first byte, across every attempt and route. Read
    # from the top-level `timeouts` only: it bounds the client's wait, not one upstream's.
    first_byte_total: float = 60.0

    def header_wait(self, stream: bool) -> float:
        """How long one attempt waits for the upstream's response headers."""
        if not stream:
            return self.read  # a non-streamed answer's headers come only once it is all generated
        return self.first_byte if self.first_byte is not None else min(DEFAULT_FIRST_BYTE, self.read)


@dataclass(frozen=True)
class Streaming:
    keepalive_interval: float = 10.0  # upstream silence before the client gets a keepalive
    idle_timeout: float = 300.0  # upstream silence that ends a stream with an in-band error


@dataclass(frozen=True)
class ResponseStoreConfig:
    max_entries: int = 1000  # responses kept for previous_response_id / item_reference / GET
    ttl: float = 86400.0  # seconds a stored response stays retrievable


@dataclass(frozen=True)
class CompactionConfig:
    key: str | None = field(default=None, repr=False)  # None: generated into the state directory


@dataclass(frozen=True)
class Account:
    id: str
    api_key: str = field(repr=False)
    weight: float = 1.0
    balance: float | None = None
    proxies: tuple[str, ...] = field(default=(), repr=False)  # its own outbound proxies, in order; () for none
    max_concurrency: int | None = None


@dataclass(frozen=True)
class ModelRules:
    """Which client model names an upstream serves, and how they are renamed for it."""

    serve: tuple[str, ...] = ("*",)  # glob patterns of client model names
    aliases: Mapping[str, str] = field(default_factory=dict)  # listed in /v1/models
    renames: Mapping[str, str] = field(default_factory=dict)  # legacy names, accepted but not listed
    prefixes: Mapping[str, str] = field(default_factory=dict)  # glob pattern → prefix to prepend
    list_upstream: bool = True  # include the upstream's own /models list in /v1/models
    preset: str | None = None  # a table from proxy.config.presets, already merged into the three above


@dataclass(frozen=True)
class ReasoningOptions:
    """How reasoning travels to an OpenAI-compatible upstream."""

    # When earlier reasoning goes back as `reasoning_content` (DeepSeek's thinking mode refuses an
    # assistant tool-call message without it): "auto" on tool-call messages whose reasoning came
    # from an OpenAI-compatible upstream, "always" on every assistant message, "never".
    passback: str = "auto"
    control: str = "none"  # how a client's request for reasoning reaches it; see REASONING_CONTROLS


REASONING_CONTROLS = ("none", "reasoning_effort", "deepseek", "qwen", "openrouter")
REASONING_PASSBACK = {"auto": "auto", True: "always", False: "never"}  # config value → mode
MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")
# How tool parameter schemas go to the upstream: as the client's JSON Schema, or reduced to the
# OpenAPI subset (Gemini's `parameters`) for servers that refuse the rest.
TOOL_SCHEMAS = ("json_schema", "openapi")
PROMPT_CACHE_MODES = ("auto", "breakpoints", "off")
@dataclass(frozen=True)
class Upstream:
    name: str
    protocol: str
    base_url: str
    accounts: tuple[Account, ...]
    models: ModelRules = field(default_factory=ModelRules)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeouts: Timeouts = field(default_factory=Timeouts)
    stream_usage: bool = True  # ask OpenAI-compatible upstreams for usage in streams
    reasoning: ReasoningOptions = field(default_factory=ReasoningOptions)
    max_output_tokens: int | None = None  # cap on (and, for Anthropic upstreams, default of) max_tokens
    max_tokens_field: str = "max_tokens"  # OpenAI reasoning models need max_completion_tokens
    pool: PoolConfig = field(default_factory=PoolConfig)
    unsupported: tuple[str, ...] = ()  # request fields removed from every request to it
    # Prompt caching the proxy asks an Anthropic upstream for when the client asked for none
    # (proxy/protocols/messages/prompt_cache.py): auto | breakpoints | off.
    prompt_cache: str = "auto"
    tool_schema: str = "json_schema"  # json_schema | openapi (TOOL_SCHEMAS)
    # The top-level `proxies`: the outbound proxies of accounts that name none of their own.
    proxies: tuple[str, ...] = field(default=(), repr=False)
    # Which price list its model names are looked up in (genai-prices' provider id); None: guessed
    # from base_url by proxy/money/prices.py.
    provider: str | None = None
    pricing: Pricing = field(default_factory=Pricing)  # this upstream's own prices, over the top level's
    # Its share of a model's first attempts among the upstreams that serve it (proxy/routing.py);
    # 0: tried only after every other upstream of the model failed.
    weight: float = 1.0


@dataclass(frozen=True)
class Config:
    client_keys: tuple[ClientKey, ...] = field(repr=False)  # proxy.config.keys: named, maybe restricted
    upstreams: tuple[Upstream, ...]
    admin_keys: tuple[ClientKey, ...] = field(default=(), repr=False)  # with a role: admin | viewer
    max_body_bytes: int = 32 * 2**20
    max_response_bytes: int = 64 * 2**20  # a non-streamed upstream answer beyond this is refused, not buffered
    timeouts: Timeouts = field(default_factory=Timeouts)
    streaming: Streaming = field(default_factory=Streaming)
    model_list_ttl: float = 300.0
    response_store: ResponseStoreConfig = field(default_factory=ResponseStoreConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    state_path: str | None = "llm-proxy-state.db"  # SQLite file for pool state; None keeps it in memory
    trust_env: bool = False  # let `requests` read HTTP(S)_PROXY / NO_PROXY from the environment
    proxies: tuple[str, ...] = field(default=(), repr=False)  # outbound proxies of accounts without their own
    protocol_plugins: tuple[str, ...] = ()  # modules to import that register extra protocols
    log_level: str = "info"
    usage: UsageConfig = field(default_factory=UsageConfig)
    request_log: RequestLogConfig = field(default_factory=RequestLogConfig)
    tracing: TracingConfig = field(default_factory=TracingConfig)
    state: StateConfig = field(default_factory=StateConfig)  # shared state: sqlite (state_path) or redis
    source: str = "<memory>"
    # Keys this config sets that are still accepted but do nothing, each as one line naming the key
    # and saying so: logged once when the server starts, and printed by `check-config`.
    deprecated: tuple[str, ...] = ()
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    server: ServerConfig = field(default_factory=ServerConfig)  # forwarded_allow_ips, tls: read at start
    pricing: Pricing = field(default_factory=Pricing)  # prices over genai-prices' (proxy/money/prices.py)
    key_groups: tuple[KeyGroup, ...] = ()  # named sets of client keys, each maybe with a budget
    budgets: BudgetSettings = field(default_factory=BudgetSettings)  # how a reservation is sized
    alerts: Alerts = field(default_factory=Alerts)  # where budget alerts are POSTed
    keys: KeysSettings = field(default_factory=KeysSettings)  # runtime keys: their prefix and pepper
    audit: AuditSettings = field(default_factory=AuditSettings)  # how long the audit trail is kept
    # Model fallbacks and the cap on a request's upstream calls (proxy/config/fallbacks.py).
    fallbacks: FallbackSettings = field(default_factory=FallbackSettings)
