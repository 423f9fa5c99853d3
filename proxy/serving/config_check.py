"""Reading a config file the way the proxy will serve it, at start and at a reload.

Owns two checks: `checked(path)` — the file loaded and validated, every upstream's protocol
resolved against the registry (plugins imported), the `redis` package or the `otel` extra present
when the config needs them, every fallback model served by some upstream — and
`for_reload(current, path)`, which also refuses what a running
proxy cannot take from a new file: another `state_path` (its workers share that file, and switching
it under them would split the pool's state) or another `state:` section (the Redis every worker's
stores are connected to), other `protocol_plugins` (a protocol's endpoint is set up when the app is
built), another `metrics.enabled`, `usage.enabled` or `logging.format` (the metrics directory and
gunicorn's logger class are set up when gunicorn starts), another `request_log.enabled`,
`retention_hours` or `max_total_mb` (its store is opened with them), another `tracing:` section
(each worker's exporter is set up when it starts), and another `keys.pepper` (every runtime key's
digest was made with it). Every refusal is a `ConfigError` naming the key, like any other config
error, so the caller prints or logs one line.

Settings that are not in the file at all — bind address, worker count, the `LLM_PROXY_*`
environment — are gunicorn's, read once when it starts; a reload re-reads only the file.

Import-light (stdlib, PyYAML and the pure codecs): gunicorn's master imports it before the
gevent workers patch the standard library.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

from proxy.config import Config, ConfigError, load
from proxy.config.load import load_text
from proxy.config.tracing import MISSING_EXTRA as TRACING_EXTRA
from proxy.protocols import registry
from proxy.routing import upstream_model
from proxy.state.redis_connection import MISSING_PACKAGE

# What a running proxy set up from the config when it started, and cannot take from a reloaded file:
# the key, how to read it, and why.
FIXED_AT_START: tuple[tuple[str, Callable[[Config], Any], str], ...] = (
    ("protocol_plugins", lambda c: list(c.protocol_plugins), "a protocol's endpoint is set up when the proxy starts"),
    ("metrics.enabled", lambda c: c.metrics.enabled, "the workers' metrics are set up when the proxy starts"),
    ("usage.enabled", lambda c: c.usage.enabled, "accounting is set up when a worker starts"),
    ("logging.format", lambda c: c.logging.format, "gunicorn's logger is chosen when the proxy starts"),
    ("request_log.enabled", lambda c: c.request_log.enabled, "the request log's store is opened when a worker starts"),
    ("tracing", lambda c: c.tracing, "each worker sets up its tracer and exporter when it starts"),
    ("request_log.retention_hours", lambda c: c.request_log.retention_hours,
     "the request log's store holds its bounds from when a worker starts"),
    ("request_log.max_total_mb", lambda c: c.request_log.max_total_mb,
     "the request log's store holds its bounds from when a worker starts"),
    ("compaction.key", lambda c: c.compaction.key,
     "every worker must seal and open compaction items with the same key"),
    ("keys.pepper", lambda c: c.keys.pepper,
     "every runtime key's digest was made with it: another would stop them all matching"),
    ("server.forwarded_allow_ips", lambda c: list(c.server.forwarded_allow_ips),
     "gunicorn and the workers read it when the proxy starts"),
    ("server.tls", lambda c: c.server.tls, "gunicorn opens its TLS context when the proxy starts"),
)

SECRET_KEYS = {"compaction.key", "keys.pepper", "tracing"}  # never quoted in the refusal (a collector's key)


def checked(path: str, text: str | None = None) -> Config:
    """The config at `path` (or `text`, read from there), with every upstream's protocol checked
    against the registry, and the `redis` package present if the state lives in Redis (found, not
    imported: the master stays light)."""
    config = registry.resolve(load(path) if text is None else load_text(text, path))
    if config.state.backend == "redis" and importlib.util.find_spec("redis") is None:
        raise ConfigError("state.backend", MISSING_PACKAGE)
    if config.tracing.enabled and not _installed("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"):
        raise ConfigError("tracing.enabled", TRACING_EXTRA)
    _fallbacks_served(config)
    return config


def _fallbacks_served(config: Config) -> None:
    """Every fallback model is one some upstream serves (routing is static: one that none serves
    could never answer, so it is a typo)."""
    for key, chains in (("fallbacks", config.fallbacks.fallbacks),
                        ("context_window_fallbacks", config.fallbacks.context_window)):
        for pattern, models in chains:
            for i, model in enumerate(models):
                if not any(upstream_model(u, model) is not None for u in config.upstreams):
                    raise ConfigError(f"{key}.{pattern}[{i}]", f"no upstream serves the model {model!r} (check "
                                                               "each upstream's models.serve, aliases and renames)")


def _installed(*modules: str) -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except ModuleNotFoundError:  # a parent package missing
        return False


def for_reload(current: Config, path: str, text: str | None = None) -> Config:
    """The config at `path` (or `text`, read from there) if a running proxy serving `current` can
    switch to it."""
    new = checked(path, text)
    if _state_file(new.state_path) != _state_file(current.state_path):
        raise ConfigError("state_path", f"cannot change on a reload (the proxy runs with {current.state_path!r}): "
                                        "its workers share that file; restart the proxy to use another")
    if new.state != current.state:
        raise ConfigError("state", f"cannot change on a reload (the proxy runs with backend {current.state.backend!r}"
                                   f"{' at ' + str(current.state.shown_url) if current.state.url else ''}): every "
                                   "worker's stores are opened when it starts; restart the proxy to use another")
    for key, read, why in FIXED_AT_START:
        if read(new) != read(current):
            shown = "" if key in SECRET_KEYS else f" (the proxy runs with {read(current)!r})"
            raise ConfigError(key, f"cannot change on a reload{shown}: {why}; restart the proxy to change it")
    return new


def _state_file(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None
