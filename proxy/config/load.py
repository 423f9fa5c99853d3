"""YAML configuration → frozen dataclasses, with validation messages that name the key.

Owns: reading the config file, `${VAR}` / `${VAR:-default}` expansion from the environment,
defaults, and every check on values. Everything else receives a validated `Config` and never
looks at raw YAML.

Must stay import-light (stdlib + PyYAML): `llm-proxy serve` and `check-config` import it in
gunicorn's master process, before the gevent worker monkey-patches the standard library.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import yaml

from proxy.config import presets as model_presets
from proxy.config import unsupported as unsupported_fields
from proxy.config.compaction import parse_compaction
from proxy.config.fallbacks import parse_fallbacks
from proxy.config.keys import parse_admin_keys, parse_audit_settings, parse_client_keys, parse_keys_settings
from proxy.config.model import (
    MAX_TOKENS_FIELDS,
    PROMPT_CACHE_MODES,
    REASONING_CONTROLS,
    REASONING_PASSBACK,
    TOOL_SCHEMAS,
    Account,
    Config,
    ModelRules,
    ReasoningOptions,
    ResponseStoreConfig,
    Streaming,
    Timeouts,
    Upstream,
)
from proxy.config.money import parse_alerts, parse_budget_settings, parse_key_groups, parse_pricing
from proxy.config.observability import parse_logging, parse_metrics
from proxy.config.pool import parse_pool
from proxy.config.request_log import parse_request_log
from proxy.config.server import parse_server
from proxy.config.state import parse_state
from proxy.config.tracing import parse_tracing
from proxy.config.usage import parse_usage
from proxy.config.values import (
    ConfigError,
    bool_,
    choice,
    expand,
    int_,
    known,
    mapping,
    number,
    proxy_urls,
    required,
    size,
    str_,
    str_map,
)


def load(path: str, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate the YAML file at `path`; raise ConfigError naming the key at fault."""
    return load_text(read_text(path), path, environ)


def read_text(path: str) -> str:
    """The config file's text, or a ConfigError saying why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise ConfigError("", f"config file {path!r} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"config file {path!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path!r}: {exc.strerror}") from None


def load_text(text: str, path: str, environ: Mapping[str, str] | None = None) -> Config:
    """Validate a config file's text, read from `path` (named in messages and kept as the source)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError("", f"{path} is not valid YAML{where}: {problem}") from None
    return parse(raw, environ=environ, source=path)


def parse(raw: Any, environ: Mapping[str, str] | None = None, source: str = "<memory>") -> Config:
    """Validate an already-parsed YAML document."""
    env = os.environ if environ is None else environ
    doc = expand(raw, "", env)
    top = mapping(doc, "")
    known(
        top,
        "",
        {
            "client_keys", "admin_keys", "upstreams", "max_body_bytes", "timeouts", "streaming",
            "model_list_ttl", "trust_env", "log_level", "state_path", "response_store", "max_response_bytes",
            "compaction",
            "proxies", "protocol_plugins", "metrics", "logging", "usage", "state", "server",
            "pricing", "key_groups", "budget_input_margin", "budget_default_max_output_tokens", "alerts",
            "keys", "audit", "request_log", "tracing", "fallbacks", "context_window_fallbacks",
            "max_attempts_total", "fallbacks_max_cost_ratio",
        },
    )
    client_keys = parse_client_keys(top.get("client_keys"), "client_keys")
    admin_keys = parse_admin_keys(top.get("admin_keys", []), "admin_keys")
    timeouts = _timeouts(top.get("timeouts", {}), "timeouts", Timeouts(), top_level=True)
    proxies = () if top.get("proxies") is None else proxy_urls(top["proxies"], "proxies")
    upstream_list = top.get("upstreams")
    if not isinstance(upstream_list, list) or not upstream_list:
        raise ConfigError("upstreams", "must be a non-empty list of upstreams")
    upstreams = tuple(_upstream(u, f"upstreams[{i}]", timeouts, proxies) for i, u in enumerate(upstream_list))
    names = [u.name for u in upstreams]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"upstreams[{i}].name", f"duplicate upstream name {name!r}")
    log_level = str_(top.get("log_level", "info"), "log_level").lower()
    if log_level not in ("debug", "info", "warning", "error"):
        raise ConfigError("log_level", "must be one of debug, info, warning, error")
    return Config(
        client_keys=client_keys,
        admin_keys=admin_keys,
        upstreams=upstreams,
        max_body_bytes=size(top.get("max_body_bytes", 32 * 2**20), "max_body_bytes"),
        max_response_bytes=size(top.get("max_response_bytes", 64 * 2**20), "max_response_bytes"),
        timeouts=timeouts,
        streaming=_streaming(top.get("streaming", {}), "streaming"),
        model_list_ttl=number(top.get("model_list_ttl", 300), "model_list_ttl", minimum=0),
        response_store=_response_store(top.get("response_store", {}), "response_store"),
        compaction=parse_compaction(top.get("compaction", {}), "compaction"),
        trust_env=bool_(top.get("trust_env", False), "trust_env"),
        proxies=proxies,
        protocol_plugins=_plugins(top.get("protocol_plugins")),
        log_level=log_level,
        usage=parse_usage(top.get("usage"), "usage"),
        request_log=parse_request_log(top.get("request_log", {})),
        tracing=parse_tracing(top.get("tracing", {})),
        state=parse_state(top.get("state"), "state"),
        state_path=None if top.get("state_path", "llm-proxy-state.db") in (None, "", ":memory:")
        else str_(top.get("state_path", "llm-proxy-state.db"), "state_path"),
        source=source,
        deprecated=_deprecated(top),
        metrics=parse_metrics(top.get("metrics", {})),
        logging=parse_logging(top.get("logging", {})),
        server=parse_server(top.get("server"), "server"),
        pricing=parse_pricing(top.get("pricing"), "pricing"),
        key_groups=parse_key_groups(top.get("key_groups"), "key_groups", {k.name for k in client_keys}),
        budgets=parse_budget_settings(top),
        alerts=parse_alerts(top.get("alerts"), "alerts"),
        keys=parse_keys_settings(top.get("keys"), "keys"),
        audit=parse_audit_settings(top.get("audit"), "audit"),
        fallbacks=parse_fallbacks(top),
    )


# Said once at startup and by check-config when a config sets the key.
QUEUE_SIZE_NO_EFFECT = (
    "streaming.queue_size: has no effect and is deprecated (a stream reads the upstream only after the "
    "client's socket took the previous frames, so memory per stream is one read whatever the value); "
    "remove it from the config"
)


def _deprecated(top: Mapping[str, Any]) -> tuple[str, ...]:
    """What the config sets that older versions used and this one accepts without effect."""
    streaming = top.get("streaming")
    return (QUEUE_SIZE_NO_EFFECT,) if isinstance(streaming, dict) and "queue_size" in streaming else ()


# ---------------------------------------------------------------- sections


def _plugins(raw: Any) -> tuple[str, ...]:
    """Python modules that register extra protocols when imported (`protocol_plugins: [my.proto]`)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("protocol_plugins", "must be a list of Python module names such as my_company.protocol")
    names = tuple(str_(m, f"protocol_plugins[{i}]") for i, m in enumerate(raw))
    for i, name in enumerate(names):
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", name):
            raise ConfigError(f"protocol_plugins[{i}]", f"must be a Python module name such as my_company.protocol "
                                                        f"(got {name!r})")
    return names


def _upstream(raw: Any, path: str, default_timeouts: Timeouts, proxies: tuple[str, ...]) -> Upstream:
    up = mapping(raw, path)
    known(
        up,
        path,
        {"name", "protocol", "base_url", "accounts", "models", "headers", "timeouts", "stream_usage", "reasoning",
         "max_output_tokens", "max_tokens_field", "pool", "unsupported", "prompt_cache", "provider", "pricing",
         "tool_schema", "weight"},
    )
    name = str_(required(up, "name", path), f"{path}.name")
    # Which names are protocols is the protocol registry's to say (proxy.protocols.registry.resolve).
    protocol = str_(required(up, "protocol", path), f"{path}.protocol")
    base_url = str_(required(up, "base_url", path), f"{path}.base_url").rstrip("/")
    if not re.match(r"^https?://[^/\s]+", base_url):
        raise ConfigError(f"{path}.base_url", f"must be an http:// or https:// URL (got {base_url!r})")
    accounts_raw = required(up, "accounts", path)
    if not isinstance(accounts_raw, list) or not accounts_raw:
        raise ConfigError(f"{path}.accounts", "must be a non-empty list of {id, api_key} entries")
    accounts = tuple(parse_account(a, f"{path}.accounts[{i}]") for i, a in enumerate(accounts_raw))
    ids = [a.id for a in accounts]
    for i, acct_id in enumerate(ids):
        if acct_id in ids[:i]:
            raise ConfigError(f"{path}.accounts[{i}].id", f"duplicate account id {acct_id!r}")
    headers = mapping(up.get("headers", {}), f"{path}.headers")
    return Upstream(
        name=name,
        protocol=protocol,
        base_url=base_url,
        accounts=accounts,
        models=_models(up.get("models", {}), f"{path}.models"),
        headers={str(k): str_(v, f"{path}.headers.{k}") for k, v in headers.items()},
        timeouts=_timeouts(up.get("timeouts", {}), f"{path}.timeouts", default_timeouts),
        stream_usage=bool_(up.get("stream_usage", True), f"{path}.stream_usage"),
        reasoning=_reasoning(up.get("reasoning", {}), f"{path}.reasoning"),
        max_output_tokens=None if up.get("max_output_tokens") is None
        else int_(up["max_output_tokens"], f"{path}.max_output_tokens", minimum=1),
        max_tokens_field=choice(up.get("max_tokens_field", "max_tokens"), f"{path}.max_tokens_field",
                                MAX_TOKENS_FIELDS),
        pool=parse_pool(up.get("pool", {}), f"{path}.pool"),
        unsupported=unsupported_fields.parse(up.get("unsupported"), f"{path}.unsupported"),
        prompt_cache=_prompt_cache(up.get("prompt_cache", "auto"), f"{path}.prompt_cache"),
        tool_schema=choice(up.get("tool_schema", "json_schema"), f"{path}.tool_schema", TOOL_SCHEMAS),
        proxies=proxies,
        provider=None if up.get("provider") is None else str_(up["provider"], f"{path}.provider").lower(),
        pricing=parse_pricing(up.get("pricing"), f"{path}.pricing"),
        weight=number(up.get("weight", 1), f"{path}.weight", minimum=0),
    )


def _prompt_cache(value: Any, path: str) -> str:
    """auto | breakpoints | off — a bare `off`, which YAML reads as false, included."""
    if value is False:
        return "off"
    if isinstance(value, bool):
        raise ConfigError(path, f"must be one of {', '.join(PROMPT_CACHE_MODES)} (got true)")
    return choice(value, path, PROMPT_CACHE_MODES)


def parse_account(raw: Any, path: str) -> Account:
    acct = mapping(raw, path)
    known(acct, path, {"id", "api_key", "weight", "balance", "proxy", "max_concurrency"})
    max_conc = acct.get("max_concurrency")
    balance = acct.get("balance")
    proxy = acct.get("proxy")
    return Account(
        id=str_(required(acct, "id", path), f"{path}.id"),
        api_key=str_(required(acct, "api_key", path), f"{path}.api_key"),
        weight=number(acct.get("weight", 1), f"{path}.weight", minimum=0),
        balance=None if balance is None else number(balance, f"{path}.balance"),
        proxies=() if proxy is None else proxy_urls(proxy, f"{path}.proxy"),
        max_concurrency=None if max_conc is None else int_(max_conc, f"{path}.max_concurrency", minimum=1),
    )


def _models(raw: Any, path: str) -> ModelRules:
    m = mapping(raw, path)
    known(m, path, {"serve", "aliases", "renames", "prefixes", "list_upstream", "preset"})
    serve = m.get("serve", ["*"])
    if isinstance(serve, str):
        serve = [serve]
    if not isinstance(serve, list) or not all(isinstance(s, str) and s for s in serve):
        raise ConfigError(f"{path}.serve", "must be a list of model name patterns such as 'gpt-*'")
    aliases = str_map(m.get("aliases", {}), f"{path}.aliases")
    renames = str_map(m.get("renames", {}), f"{path}.renames")
    prefixes = str_map(m.get("prefixes", {}), f"{path}.prefixes")
    preset = None if m.get("preset") is None else choice(m["preset"], f"{path}.preset", tuple(model_presets.PRESETS))
    if preset is not None:
        aliases, renames, prefixes = model_presets.merge(preset, aliases, renames, prefixes)
    return ModelRules(serve=tuple(serve), aliases=aliases, renames=renames, prefixes=prefixes,
                      list_upstream=bool_(m.get("list_upstream", True), f"{path}.list_upstream"), preset=preset)


def _timeouts(raw: Any, path: str, base: Timeouts, top_level: bool = False) -> Timeouts:
    t = mapping(raw, path)
    if not top_level and "first_byte_total" in t:
        raise ConfigError(f"{path}.first_byte_total", "bounds a client's whole wait, across every upstream its "
                                                      "model is routed to: set it once, under the top-level timeouts")
    known(t, path, {"connect", "read", "first_byte"} | ({"first_byte_total"} if top_level else set()))
    first_byte = t.get("first_byte", base.first_byte)
    return Timeouts(
        connect=number(t.get("connect", base.connect), f"{path}.connect", minimum=0.001),
        read=number(t.get("read", base.read), f"{path}.read", minimum=0.001),
        first_byte=None if first_byte is None else number(first_byte, f"{path}.first_byte", minimum=0.001),
        first_byte_total=number(t.get("first_byte_total", base.first_byte_total), f"{path}.first_byte_total",
                                minimum=0.001),
    )


def _response_store(raw: Any, path: str) -> ResponseStoreConfig:
    r = mapping(raw, path)
    known(r, path, {"max_entries", "ttl"})
    return ResponseStoreConfig(
        max_entries=int_(r.get("max_entries", 1000), f"{path}.max_entries", minimum=0),
        ttl=number(r.get("ttl", 86400), f"{path}.ttl", minimum=1),
    )


def _streaming(raw: Any, path: str) -> Streaming:
    s = mapping(raw, path)
    known(s, path, {"keepalive_interval", "idle_timeout", "queue_size"})
    if "queue_size" in s:  # deprecated, without effect (QUEUE_SIZE_NO_EFFECT); still checked as it always was
        int_(s["queue_size"], f"{path}.queue_size", minimum=1)
    d = Streaming()
    return Streaming(
        keepalive_interval=number(
            s.get("keepalive_interval", d.keepalive_interval), f"{path}.keepalive_interval", minimum=0.01
        ),
        idle_timeout=number(s.get("idle_timeout", d.idle_timeout), f"{path}.idle_timeout", minimum=0.01),
    )


def _reasoning(raw: Any, path: str) -> ReasoningOptions:
    r = mapping(raw, path)
    known(r, path, {"passback", "control"})
    return ReasoningOptions(
        passback=_passback(r.get("passback", "auto"), f"{path}.passback"),
        control=choice(r.get("control", "none"), f"{path}.control", REASONING_CONTROLS),
    )


def _passback(raw: Any, path: str) -> str:
    if isinstance(raw, bool) or raw == "auto":
        return REASONING_PASSBACK[raw]
    raise ConfigError(path, f"must be auto, true or false (got {raw!r})")
