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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

PROTOCOLS = ("openai", "anthropic", "responses")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


class ConfigError(Exception):
    """A config problem, phrased as `<key path>: <what is wrong>`."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0  # TCP + TLS handshake with the upstream
    read: float = 300.0  # waiting for response headers, and each read of a non-stream body


@dataclass(frozen=True)
class Streaming:
    keepalive_interval: float = 10.0  # upstream silence before the client gets a keepalive
    idle_timeout: float = 300.0  # upstream silence that ends a stream with an in-band error
    queue_size: int = 16  # upstream reads (up to 16 KiB each) buffered per stream before reading stops


@dataclass(frozen=True)
class ResponseStoreConfig:
    max_entries: int = 1000  # responses kept for previous_response_id / item_reference / GET
    ttl: float = 86400.0  # seconds a stored response stays retrievable


@dataclass(frozen=True)
class Account:
    id: str
    api_key: str = field(repr=False)
    weight: float = 1.0
    balance: float | None = None
    proxy: str | None = field(default=None, repr=False)
    max_concurrency: int | None = None


@dataclass(frozen=True)
class ModelRules:
    """Which client model names an upstream serves, and how they are renamed for it."""

    serve: tuple[str, ...] = ("*",)  # glob patterns of client model names
    aliases: Mapping[str, str] = field(default_factory=dict)  # listed in /v1/models
    renames: Mapping[str, str] = field(default_factory=dict)  # legacy names, accepted but not listed
    prefixes: Mapping[str, str] = field(default_factory=dict)  # glob pattern → prefix to prepend
    list_upstream: bool = True  # include the upstream's own /models list in /v1/models


@dataclass(frozen=True)
class ReasoningOptions:
    """How reasoning travels to an OpenAI-compatible upstream."""

    passback: bool = False  # send earlier reasoning back as `reasoning_content` (DeepSeek-style backends)
    control: str = "none"  # how a client's request for reasoning reaches it; see REASONING_CONTROLS


REASONING_CONTROLS = ("none", "reasoning_effort", "deepseek", "qwen", "openrouter")
MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")


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


@dataclass(frozen=True)
class Config:
    client_keys: tuple[str, ...] = field(repr=False)
    upstreams: tuple[Upstream, ...]
    admin_keys: tuple[str, ...] = field(default=(), repr=False)
    max_body_bytes: int = 32 * 2**20
    timeouts: Timeouts = field(default_factory=Timeouts)
    streaming: Streaming = field(default_factory=Streaming)
    model_list_ttl: float = 300.0
    response_store: ResponseStoreConfig = field(default_factory=ResponseStoreConfig)
    trust_env: bool = False  # let `requests` read HTTP(S)_PROXY / NO_PROXY from the environment
    log_level: str = "info"
    source: str = "<memory>"


def load(path: str, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate the YAML file at `path`; raise ConfigError naming the key at fault."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError("", f"config file {path!r} does not exist") from None
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError("", f"{path} is not valid YAML{where}: {problem}") from None
    return parse(raw, environ=environ, source=path)


def parse(raw: Any, environ: Mapping[str, str] | None = None, source: str = "<memory>") -> Config:
    """Validate an already-parsed YAML document."""
    env = os.environ if environ is None else environ
    doc = _expand(raw, "", env)
    top = _mapping(doc, "")
    _known(
        top,
        "",
        {
            "client_keys", "admin_keys", "upstreams", "max_body_bytes", "timeouts", "streaming",
            "model_list_ttl", "trust_env", "log_level", "state_path", "response_store",
        },
    )
    client_keys = _keys(top.get("client_keys"), "client_keys", required=True)
    admin_keys = _keys(top.get("admin_keys", []), "admin_keys", required=False)
    timeouts = _timeouts(top.get("timeouts", {}), "timeouts", Timeouts())
    upstream_list = top.get("upstreams")
    if not isinstance(upstream_list, list) or not upstream_list:
        raise ConfigError("upstreams", "must be a non-empty list of upstreams")
    upstreams = tuple(_upstream(u, f"upstreams[{i}]", timeouts) for i, u in enumerate(upstream_list))
    names = [u.name for u in upstreams]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"upstreams[{i}].name", f"duplicate upstream name {name!r}")
    log_level = _str(top.get("log_level", "info"), "log_level").lower()
    if log_level not in ("debug", "info", "warning", "error"):
        raise ConfigError("log_level", "must be one of debug, info, warning, error")
    return Config(
        client_keys=client_keys,
        admin_keys=admin_keys,
        upstreams=upstreams,
        max_body_bytes=_size(top.get("max_body_bytes", 32 * 2**20), "max_body_bytes"),
        timeouts=timeouts,
        streaming=_streaming(top.get("streaming", {}), "streaming"),
        model_list_ttl=_number(top.get("model_list_ttl", 300), "model_list_ttl", minimum=0),
        response_store=_response_store(top.get("response_store", {}), "response_store"),
        trust_env=_bool(top.get("trust_env", False), "trust_env"),
        log_level=log_level,
        source=source,
    )


# ---------------------------------------------------------------- sections


def _upstream(raw: Any, path: str, default_timeouts: Timeouts) -> Upstream:
    up = _mapping(raw, path)
    _known(
        up,
        path,
        {"name", "protocol", "base_url", "accounts", "models", "headers", "timeouts", "stream_usage", "reasoning",
         "max_output_tokens", "max_tokens_field"},
    )
    name = _str(_required(up, "name", path), f"{path}.name")
    protocol = _str(_required(up, "protocol", path), f"{path}.protocol")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"{path}.protocol", f"must be one of {', '.join(PROTOCOLS)} (got {protocol!r})")
    base_url = _str(_required(up, "base_url", path), f"{path}.base_url").rstrip("/")
    if not re.match(r"^https?://[^/\s]+", base_url):
        raise ConfigError(f"{path}.base_url", f"must be an http:// or https:// URL (got {base_url!r})")
    accounts_raw = _required(up, "accounts", path)
    if not isinstance(accounts_raw, list) or not accounts_raw:
        raise ConfigError(f"{path}.accounts", "must be a non-empty list of {id, api_key} entries")
    accounts = tuple(_account(a, f"{path}.accounts[{i}]") for i, a in enumerate(accounts_raw))
    ids = [a.id for a in accounts]
    for i, acct_id in enumerate(ids):
        if acct_id in ids[:i]:
            raise ConfigError(f"{path}.accounts[{i}].id", f"duplicate account id {acct_id!r}")
    headers = _mapping(up.get("headers", {}), f"{path}.headers")
    return Upstream(
        name=name,
        protocol=protocol,
        base_url=base_url,
        accounts=accounts,
        models=_models(up.get("models", {}), f"{path}.models"),
        headers={str(k): _str(v, f"{path}.headers.{k}") for k, v in headers.items()},
        timeouts=_timeouts(up.get("timeouts", {}), f"{path}.timeouts", default_timeouts),
        stream_usage=_bool(up.get("stream_usage", True), f"{path}.stream_usage"),
        reasoning=_reasoning(up.get("reasoning", {}), f"{path}.reasoning"),
        max_output_tokens=None if up.get("max_output_tokens") is None
        else _int(up["max_output_tokens"], f"{path}.max_output_tokens", minimum=1),
        max_tokens_field=_choice(up.get("max_tokens_field", "max_tokens"), f"{path}.max_tokens_field",
                                 MAX_TOKENS_FIELDS),
    )


def _reasoning(raw: Any, path: str) -> ReasoningOptions:
    r = _mapping(raw, path)
    _known(r, path, {"passback", "control"})
    return ReasoningOptions(
        passback=_bool(r.get("passback", False), f"{path}.passback"),
        control=_choice(r.get("control", "none"), f"{path}.control", REASONING_CONTROLS),
    )


def _account(raw: Any, path: str) -> Account:
    acct = _mapping(raw, path)
    _known(acct, path, {"id", "api_key", "weight", "balance", "proxy", "max_concurrency"})
    max_conc = acct.get("max_concurrency")
    balance = acct.get("balance")
    proxy = acct.get("proxy")
    return Account(
        id=_str(_required(acct, "id", path), f"{path}.id"),
        api_key=_str(_required(acct, "api_key", path), f"{path}.api_key"),
        weight=_number(acct.get("weight", 1), f"{path}.weight", minimum=0),
        balance=None if balance is None else _number(balance, f"{path}.balance"),
        proxy=None if proxy is None else _str(proxy, f"{path}.proxy"),
        max_concurrency=None if max_conc is None else _int(max_conc, f"{path}.max_concurrency", minimum=1),
    )


def _models(raw: Any, path: str) -> ModelRules:
    m = _mapping(raw, path)
    _known(m, path, {"serve", "aliases", "renames", "prefixes", "list_upstream"})
    serve = m.get("serve", ["*"])
    if isinstance(serve, str):
        serve = [serve]
    if not isinstance(serve, list) or not all(isinstance(s, str) and s for s in serve):
        raise ConfigError(f"{path}.serve", "must be a list of model name patterns such as 'gpt-*'")
    return ModelRules(
        serve=tuple(serve),
        aliases=_str_map(m.get("aliases", {}), f"{path}.aliases"),
        renames=_str_map(m.get("renames", {}), f"{path}.renames"),
        prefixes=_str_map(m.get("prefixes", {}), f"{path}.prefixes"),
        list_upstream=_bool(m.get("list_upstream", True), f"{path}.list_upstream"),
    )


def _timeouts(raw: Any, path: str, base: Timeouts) -> Timeouts:
    t = _mapping(raw, path)
    _known(t, path, {"connect", "read"})
    return Timeouts(
        connect=_number(t.get("connect", base.connect), f"{path}.connect", minimum=0.001),
        read=_number(t.get("read", base.read), f"{path}.read", minimum=0.001),
    )


def _response_store(raw: Any, path: str) -> ResponseStoreConfig:
    r = _mapping(raw, path)
    _known(r, path, {"max_entries", "ttl"})
    return ResponseStoreConfig(
        max_entries=_int(r.get("max_entries", 1000), f"{path}.max_entries", minimum=0),
        ttl=_number(r.get("ttl", 86400), f"{path}.ttl", minimum=1),
    )


def _streaming(raw: Any, path: str) -> Streaming:
    s = _mapping(raw, path)
    _known(s, path, {"keepalive_interval", "idle_timeout", "queue_size"})
    d = Streaming()
    return Streaming(
        keepalive_interval=_number(
            s.get("keepalive_interval", d.keepalive_interval), f"{path}.keepalive_interval", minimum=0.01
        ),
        idle_timeout=_number(s.get("idle_timeout", d.idle_timeout), f"{path}.idle_timeout", minimum=0.01),
        queue_size=_int(s.get("queue_size", d.queue_size), f"{path}.queue_size", minimum=1),
    )


# ---------------------------------------------------------------- scalar checks


def _expand(value: Any, path: str, env: Mapping[str, str]) -> Any:
    """Replace ${VAR} and ${VAR:-default} in every string, recursively."""
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(path or "<root>", f"environment variable {name} is not set")

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, _join(path, str(k)), env) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{path}[{i}]", env) for i, v in enumerate(value)]
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _mapping(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path or "<root>", f"must be a mapping (got {type(value).__name__})")
    return value


def _known(m: Mapping[str, Any], path: str, allowed: set[str]) -> None:
    for key in m:
        if key not in allowed:
            raise ConfigError(_join(path, str(key)), f"unknown key; expected one of {', '.join(sorted(allowed))}")


def _required(m: Mapping[str, Any], key: str, path: str) -> Any:
    if m.get(key) is None:
        raise ConfigError(_join(path, key), "is required")
    return m[key]


def _str(value: Any, path: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(path, f"must be a string (got {type(value).__name__})")
    text = str(value)
    if not text.strip():
        raise ConfigError(path, "must not be empty")
    return text


def _choice(value: Any, path: str, allowed: tuple[str, ...]) -> str:
    text = _str(value, path)
    if text not in allowed:
        raise ConfigError(path, f"must be one of {', '.join(allowed)} (got {text!r})")
    return text


def _str_map(value: Any, path: str) -> dict[str, str]:
    m = _mapping(value, path)
    return {str(k): _str(v, _join(path, str(k))) for k, v in m.items()}


def _keys(value: Any, path: str, required: bool) -> tuple[str, ...]:
    if value is None:
        value = []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(path, "must be a list of keys")
    keys = tuple(_str(k, f"{path}[{i}]") for i, k in enumerate(value))
    if required and not keys:
        raise ConfigError(path, "must list at least one key that clients present")
    return keys


def _checked(value: Any, path: str, kind: str, convert: Callable[[Any], Any]) -> Any:
    if isinstance(value, bool):
        raise ConfigError(path, f"must be {kind} (got a boolean)")
    try:
        return convert(value)
    except (TypeError, ValueError):
        raise ConfigError(path, f"must be {kind} (got {value!r})") from None


def _number(value: Any, path: str, minimum: float | None = None) -> float:
    number: float = _checked(value, path, "a number", float)
    if minimum is not None and number < minimum:
        raise ConfigError(path, f"must be at least {minimum:g} (got {number:g})")
    return number


def _int(value: Any, path: str, minimum: int | None = None) -> int:
    number = _number(value, path, minimum)
    if number != int(number):
        raise ConfigError(path, f"must be a whole number (got {value!r})")
    return int(number)


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"must be true or false (got {value!r})")
    return value


def _size(value: Any, path: str) -> int:
    """A byte count: an integer, or a string such as '32MiB' / '500 KB'."""
    if isinstance(value, str):
        match = _SIZE.match(value)
        if not match:
            raise ConfigError(path, f"must be a size such as 33554432 or '32MiB' (got {value!r})")
        unit = (match.group(2) or "B").lower()
        value = float(match.group(1)) * _SIZE_UNITS[unit]
    return _int(value, path, minimum=1)
