"""The `state:` section: where the state the workers and hosts share lives.

Owns `state.backend` (`sqlite`, the default — the `state_path` file, one host — or `redis`, several
hosts sharing one pool), `state.url` (`redis://`, `rediss://` for TLS, or `unix://`; a password
from the environment as `${REDIS_PASSWORD}` like any config value), `state.sentinel` (instead of
`url`: a Redis primary found and followed through Redis Sentinel — `hosts`, `service_name`,
`password`, `sentinel_password`, `db`, `tls`) and `state.prefix` (put before every key, so several
proxies can share one Redis). Import-light: stdlib only — whether the `redis` package is installed
is checked by the one module that connects (proxy/state/redis_connection.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from proxy.config.values import ConfigError, bool_, choice, int_, join, known, mapping, str_

BACKENDS = ("sqlite", "redis")
REDIS_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class SentinelConfig:
    """Redis through Sentinel: the sentinels to ask, the name of the primary they watch."""

    hosts: tuple[tuple[str, int], ...]
    service_name: str
    password: str | None = field(default=None, repr=False)  # the primary's (and replicas')
    sentinel_password: str | None = field(default=None, repr=False)  # the sentinels' own, if they have one
    db: int = 0
    tls: bool = False  # TLS to the sentinels and the primary

    @property
    def shown(self) -> str:
        return (f"sentinel {self.service_name!r} via {', '.join(f'{h}:{p}' for h, p in self.hosts)}"
                f"{' (TLS)' if self.tls else ''} db {self.db}")


@dataclass(frozen=True)
class StateConfig:
    backend: str = "sqlite"
    url: str | None = field(default=None, repr=False)  # may hold a password: never logged whole
    prefix: str = "llm-proxy:"
    sentinel: SentinelConfig | None = None

    @property
    def shown_url(self) -> str | None:
        """Where Redis is, without a password, for the startup summary and messages."""
        if self.sentinel is not None:
            return self.sentinel.shown
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
    known(section, path, {"backend", "url", "prefix", "sentinel"})
    default = StateConfig()
    backend = choice(section.get("backend", default.backend), join(path, "backend"), BACKENDS)
    prefix = str_(section.get("prefix", default.prefix), join(path, "prefix"))
    url, sentinel = section.get("url"), section.get("sentinel")
    if backend == "sqlite":
        for name in ("url", "sentinel"):
            if section.get(name) is not None:
                raise ConfigError(join(path, name), "is only for backend: redis (the sqlite backend uses state_path)")
        return StateConfig(backend=backend, prefix=prefix)
    if url is not None and sentinel is not None:
        raise ConfigError(join(path, "sentinel"), "and state.url are two ways to find Redis: give one (sentinel "
                                                  "finds the primary itself and follows it when it fails over)")
    if sentinel is not None:
        return StateConfig(backend=backend, prefix=prefix, sentinel=parse_sentinel(sentinel, join(path, "sentinel")))
    if url is None:
        raise ConfigError(join(path, "url"), "is required with backend: redis (e.g. redis://redis.internal:6379/0, "
                                             "rediss:// for TLS, a password as ${REDIS_PASSWORD}), or state.sentinel")
    url = str_(url, join(path, "url"))
    scheme = urlsplit(url).scheme
    if scheme not in REDIS_SCHEMES:
        raise ConfigError(join(path, "url"), f"must start with redis://, rediss:// or unix:// "
                                             f"(got {redact_url(url)!r})")
    return StateConfig(backend=backend, url=url, prefix=prefix)


def parse_sentinel(raw: Any, path: str) -> SentinelConfig:
    section = mapping(raw, path)
    known(section, path, {"hosts", "service_name", "password", "sentinel_password", "db", "tls"})
    hosts_path = join(path, "hosts")
    listed = section.get("hosts")
    if not isinstance(listed, list) or not listed:
        raise ConfigError(hosts_path, 'must list the sentinels as "host:port" (e.g. ["10.0.0.5:26379", '
                                      '"10.0.0.6:26379", "10.0.0.7:26379"])')
    hosts = []
    for i, item in enumerate(listed):
        text = str_(item, f"{hosts_path}[{i}]")
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{hosts_path}[{i}]", f'must be "host:port" (got {text!r})')
        hosts.append((host.strip("[]"), int(port)))
    if "service_name" not in section:
        raise ConfigError(join(path, "service_name"), "is required: the name the sentinels monitor the primary by "
                                                      "(their `sentinel monitor NAME …` line)")
    passwords = {name: str_(section[name], join(path, name)) if section.get(name) is not None else None
                 for name in ("password", "sentinel_password")}
    return SentinelConfig(hosts=tuple(hosts), service_name=str_(section["service_name"], join(path, "service_name")),
                          db=int_(section.get("db", 0), join(path, "db"), minimum=0),
                          tls=bool_(section.get("tls", False), join(path, "tls")), **passwords)
