"""The client's address when the proxy sits behind a reverse proxy (`server.forwarded_allow_ips`).

Owns `REMOTE_ADDR` in the WSGI environ, which the access log (`%(h)s`, JSON `remote_addr`) reads.
gunicorn sets it to the TCP peer. When that peer is trusted (an address or network of
`server.forwarded_allow_ips`, or `*`; a peer on a Unix socket too, as gunicorn trusts it), the
client is the rightmost X-Forwarded-For hop that is not itself trusted — nginx and Caddy append the
address they saw, so hops a client wrote itself are left of it and never believed; if every hop is
trusted, the leftmost. An untrusted peer's X-Forwarded-For is ignored altogether. The peer itself
stays in `llm_proxy.peer_addr`. gunicorn applies the same list to X-Forwarded-Proto
(`wsgi.url_scheme`), set from the config in proxy/serving/settings.py.

Stdlib only.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Any

PEER_KEY = "llm_proxy.peer_addr"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Trusted:
    def __init__(self, allow: Iterable[str]) -> None:
        allow = tuple(allow)
        self.everyone = "*" in allow
        self.networks: tuple[Network, ...] = tuple(ipaddress.ip_network(a, strict=False) for a in allow if a != "*")

    def __bool__(self) -> bool:
        return self.everyone or bool(self.networks)

    def __contains__(self, address: str) -> bool:
        if self.everyone:
            return True
        try:
            ip = ipaddress.ip_address(address.strip().strip("[]"))
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in net for net in self.networks)


def client_address(peer: str, forwarded_for: str | None, trusted: Trusted) -> str:
    """Who the request is from: `peer`, or, if `peer` is trusted, what X-Forwarded-For says."""
    if not forwarded_for or not (peer in trusted or _unix(peer)):
        return peer
    hops = [_host(h) for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if hop not in trusted:
            return hop
    return hops[0] if hops else peer


def _unix(peer: str) -> bool:
    """A peer on a Unix socket (nginx's `proxy_pass http://unix:…`) has no IP: trusted, as gunicorn does."""
    try:
        ipaddress.ip_address(peer.strip("[]"))
    except ValueError:
        return True
    return False


def _host(hop: str) -> str:
    """An X-Forwarded-For entry without a port (`[::1]:443`, `1.2.3.4:5678`) or brackets."""
    hop = hop.strip()
    if hop.startswith("["):
        return hop[1:hop.find("]")] if "]" in hop else hop[1:]
    if hop.count(":") == 1:  # IPv4 with a port; a bare IPv6 address has several colons
        return hop.split(":", 1)[0]
    return hop


def middleware(app: Callable[..., Any], allow: Iterable[str]) -> Callable[..., Any]:
    """`app` with REMOTE_ADDR rewritten from X-Forwarded-For for trusted peers."""
    trusted = Trusted(allow)
    if not trusted:
        return app

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        peer = environ.get("REMOTE_ADDR", "")
        forwarded = environ.get("HTTP_X_FORWARDED_FOR")
        if forwarded:
            environ[PEER_KEY] = peer
            environ["REMOTE_ADDR"] = client_address(peer, forwarded, trusted)
        return app(environ, start_response)

    return wrapped
