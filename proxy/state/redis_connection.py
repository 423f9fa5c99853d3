"""The one place the proxy connects to Redis (`state: {backend: redis}`).

Owns the client's settings — short timeouts, so a Redis that stops answering costs a request
milliseconds, not a worker, and a health check on idle pooled connections — and the key naming
every Redis-backed store uses (`key(config, "part", …)` → `<prefix>part:…`). The `redis` package is
an optional dependency (`pip install 'llm-proxy[redis]'`): it is imported here only, when a config
asks for the backend, and its absence is a config error that says how to install it.
Under gunicorn's gevent worker redis-py's sockets are cooperative (the standard library is patched),
so a wait on Redis blocks one greenlet, never the worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.config.state import StateConfig
from proxy.config.values import ConfigError

if TYPE_CHECKING:
    import redis

CONNECT_TIMEOUT = 2.0  # seconds to open a connection
COMMAND_TIMEOUT = 2.0  # seconds for one command's answer
HEALTH_CHECK_INTERVAL = 30  # seconds a pooled connection may idle before it is PINGed on reuse
MISSING_PACKAGE = "redis needs the redis package: pip install 'llm-proxy[redis]'"


def connect(state: StateConfig) -> redis.Redis:
    """A client for `state.url` (not connected until first used)."""
    if state.url is None:
        raise ConfigError("state.url", "is required with backend: redis")
    try:
        import redis
    except ImportError:
        raise ConfigError("state.backend", MISSING_PACKAGE) from None
    return redis.Redis.from_url(state.url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=COMMAND_TIMEOUT,
                                health_check_interval=HEALTH_CHECK_INTERVAL)


def key(state: StateConfig, *parts: str) -> str:
    """A key under the configured prefix: key(state, "account", "main", "a1") → "llm-proxy:account:main:a1"."""
    return state.prefix + ":".join(parts)


def unreachable_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean Redis could not be reached or did not answer in time (a store
    degrades on these, and raises anything else)."""
    import redis

    return (redis.ConnectionError, redis.TimeoutError, OSError)
