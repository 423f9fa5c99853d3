"""The `state:` section: where the state the workers and hosts share lives.

Owns `state.backend` (`sqlite`, the default — the `state_path` file, one host — or `redis`, several
hosts sharing one pool), `state.url` (`redis://`, `rediss://` for TLS, or `unix://`; a password
from the environment as `${REDIS_PASSWORD}` like any config value) and `state.prefix` (put before
every key, so several proxies can share one Redis). Import-light: stdlib only — whether the `redis`
package is installed is checked by the one module that connects (proxy/state/redis_connection.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from proxy.config.values import ConfigError, choice, join, known, mapping, str_

BACKENDS = ("sqlite", "redis")
REDIS_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class StateConfig:
    backend: str = "sqlite"
    url: str | None = field(default=None, repr=False)  # may hold a password: never logged whole
    prefix: str = "llm-proxy:"

    @property
    def shown_url(self) -> str | None:
        """The URL without its password, for the startup summary and messages."""
        return redact_url(self.url) if self.url else None


def redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return parts._replace(netloc=f"{user}{host}{port}").geturl()


def parse_state(raw: Any, path: str) -> StateConfig:
    section = mapping(raw if raw is not None else {}, path)
    known(section, path, {"backend", "url", "prefix"})
    default = StateConfig()
    backend = choice(section.get("backend", default.backend), join(path, "backend"), BACKENDS)
    prefix = str_(section.get("prefix", default.prefix), join(path, "prefix"))
    url = section.get("url")
    if backend == "sqlite":
        if url is not None:
            raise ConfigError(join(path, "url"), "is only for backend: redis (the sqlite backend uses state_path)")
        return StateConfig(backend=backend, prefix=prefix)
    if url is None:
        raise ConfigError(join(path, "url"), "is required with backend: redis (e.g. redis://redis.internal:6379/0, "
                                             "rediss:// for TLS, a password as ${REDIS_PASSWORD})")
    url = str_(url, join(path, "url"))
    scheme = urlsplit(url).scheme
    if scheme not in REDIS_SCHEMES:
        raise ConfigError(join(path, "url"), f"must start with redis://, rediss:// or unix:// "
                                             f"(got {redact_url(url)!r})")
    return StateConfig(backend=backend, url=url, prefix=prefix)
