"""The `server:` section: what gunicorn serves the proxy's socket with, beside the bind address.

  server:
    forwarded_allow_ips: [127.0.0.1, "::1"]   # peers whose X-Forwarded-For / -Proto are believed
    tls:                                      # HTTPS on the proxy's own socket (omit for plain HTTP)
      certfile: /etc/llm-proxy/tls/cert.pem   # the certificate chain, PEM
      keyfile: /etc/llm-proxy/tls/key.pem     # its private key, PEM

Owns their shape, defaults and checks. `forwarded_allow_ips` is a list of addresses or networks
(CIDR), or `["*"]` for any peer; empty trusts no peer. A request's client address (the access log's
`%(h)s` / `remote_addr`) is the peer's unless the peer is in the list — then it is the rightmost
X-Forwarded-For hop that is not itself trusted (proxy/serving/forwarded.py). The TLS files must
exist and be readable when the config is checked, so a typo is one line at `check-config`, not a
worker that cannot boot. Both are read when gunicorn starts (proxy/serving/settings.py); a reload
cannot change them. Import-light: stdlib only.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any

from proxy.config.values import ConfigError, join, known, mapping, required, str_

DEFAULT_FORWARDED_ALLOW_IPS = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class TlsConfig:
    certfile: str
    keyfile: str


@dataclass(frozen=True)
class ServerConfig:
    forwarded_allow_ips: tuple[str, ...] = DEFAULT_FORWARDED_ALLOW_IPS
    tls: TlsConfig | None = field(default=None)


def parse_server(raw: Any, path: str = "server") -> ServerConfig:
    section = mapping(raw if raw is not None else {}, path)
    known(section, path, {"forwarded_allow_ips", "tls"})
    allow = section.get("forwarded_allow_ips", list(DEFAULT_FORWARDED_ALLOW_IPS))
    key = join(path, "forwarded_allow_ips")
    if isinstance(allow, str):
        allow = [part.strip() for part in allow.split(",") if part.strip()]
    if not isinstance(allow, list):
        raise ConfigError(key, "must be a list of IP addresses or networks such as 10.0.0.0/8, or [\"*\"]")
    ips = tuple(_network(item, f"{key}[{i}]") for i, item in enumerate(allow))
    tls = section.get("tls")
    return ServerConfig(forwarded_allow_ips=ips, tls=None if tls is None else _tls(tls, join(path, "tls")))


def _network(raw: Any, path: str) -> str:
    text = str_(raw, path).strip()
    if text == "*":
        return text
    try:
        ipaddress.ip_network(text)  # strict, as gunicorn reads it: 10.0.0.0/8, not 10.0.0.1/8
    except ValueError:
        raise ConfigError(path, f"must be an IP address or a network such as 10.0.0.0/8, with no host bits "
                                f"set (got {text!r})") from None
    return text


def _tls(raw: Any, path: str) -> TlsConfig:
    section = mapping(raw, path)
    known(section, path, {"certfile", "keyfile"})
    files = {}
    for name in ("certfile", "keyfile"):
        key = join(path, name)
        value = str_(required(section, name, path), key)
        if not os.path.isfile(value):
            raise ConfigError(key, f"{value!r} does not exist or is not a file")
        if not os.access(value, os.R_OK):
            raise ConfigError(key, f"{value!r} is not readable by this user")
        files[name] = os.path.abspath(value)
    return TlsConfig(certfile=files["certfile"], keyfile=files["keyfile"])
