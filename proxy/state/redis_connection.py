"""The one place the proxy connects to Redis (`state: {backend: redis}`).

Owns the client's settings — short timeouts and one quick retry on a fresh connection, so a Redis
that stops answering costs a request milliseconds, not a worker, and a health check on idle pooled
connections — how Redis is found (`state.url`, or `state.sentinel`: redis-py's Sentinel support asks
the sentinels for the primary on every new connection, so after a failover the next connection
goes to the promoted replica, and a connection still on the old primary, now a replica, is dropped
on its first READONLY answer), `check` (a wrong password is a configuration error, not something
to retry), and the key naming every Redis-backed store uses (`key(config, "part", …)` →
`<prefix>part:…`). The `redis` package is an optional dependency (`pip install 'llm-proxy[redis]'`):
it is imported here only, when a config asks for the backend, and its absence is a config error
that says how to install it.
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
    """A client for `state.url` or `state.sentinel`'s primary (not connected until first used)."""
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError:
        raise ConfigError("state.backend", MISSING_PACKAGE) from None
    # One retry, at once, on a fresh connection: what a pooled connection cut by a restart or a
    # failover needs; redis-py's default (ten, with backoff) would hold a request for seconds
    # while Redis is really away — the stores fall back instead.
    common = {"socket_connect_timeout": CONNECT_TIMEOUT, "socket_timeout": COMMAND_TIMEOUT,
              "retry": Retry(NoBackoff(), 1)}
    sentinel = state.sentinel
    if sentinel is not None:
        from redis.sentinel import Sentinel

        tls = {"ssl": True} if sentinel.tls else {}
        sentinels = Sentinel(list(sentinel.hosts), sentinel_kwargs={"password": sentinel.sentinel_password,
                                                                    **common, **tls},
                             password=sentinel.password, db=sentinel.db, **common, **tls)
        return sentinels.master_for(sentinel.service_name, health_check_interval=HEALTH_CHECK_INTERVAL)
    if state.url is None:
        raise ConfigError("state.url", "is required with backend: redis")
    return redis.Redis.from_url(state.url, health_check_interval=HEALTH_CHECK_INTERVAL, **common)


def check(state: StateConfig) -> str | None:
    """Try the configured Redis once: a ConfigError if it refuses the password (or the sentinels
    theirs); else None, or what went wrong if it could not be reached (the caller goes on — a Redis
    that is away is waited out, degraded, not a reason to stay down)."""
    import redis

    client = connect(state)
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        raise ConfigError(_password_key(state, exc), f"Redis refused the password ({exc})") from None
    except redis.ResponseError as exc:  # an ACL user without a password, NOAUTH: the same mistake
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc) or "invalid password" in str(exc):
            raise ConfigError(_password_key(state, exc), f"Redis refused the password ({exc})") from None
        return str(exc)
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, redis.AuthenticationError) or "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise ConfigError(_password_key(state, exc), f"Redis refused the password ({exc})") from None
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return None


def _password_key(state: StateConfig, exc: BaseException) -> str:
    """Which config key holds the password Redis refused."""
    if state.sentinel is None:
        return "state.url"
    return "state.sentinel.sentinel_password" if "sentinel" in str(exc).lower() else "state.sentinel.password"


def key(state: StateConfig, *parts: str) -> str:
    """A key under the configured prefix: key(state, "account", "main", "a1") → "llm-proxy:account:main:a1"."""
    return state.prefix + ":".join(parts)


def unreachable_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean Redis could not be reached or did not answer in time (a store
    degrades on these, and raises anything else)."""
    import redis

    return (redis.ConnectionError, redis.TimeoutError, OSError)
