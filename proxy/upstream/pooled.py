"""Connections to the upstreams and their reuse, below `UpstreamClient`: urllib3's pools with
connections that check themselves cheaply, the requests adapter that keeps them, and urllib3's
failures told as requests' exceptions.

Owns how a request reaches the wire once `proxy.upstream.client` has built it; nothing here knows
an upstream, an account or a protocol.
"""

from __future__ import annotations

from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import (
    ClosedPoolError,
    ConnectTimeoutError,
    HTTPError,
    InvalidHeader,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from proxy.upstream.sockets import peek


def _still_open(conn: HTTPConnection) -> bool:
    """Whether a pooled connection can carry the next request: its socket shows neither EOF nor
    stray bytes. urllib3 asks the same through `select.poll`, which under gevent builds a
    watcher set for each call (a twentieth of a non-streamed request's CPU); a peek answers at once."""
    return conn.sock is not None and peek(conn.sock) is None


class _HTTPConnection(HTTPConnection):
    is_connected = property(_still_open)


class _HTTPSConnection(HTTPSConnection):
    is_connected = property(_still_open)


class _HTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class Adapter(HTTPAdapter):
    """requests' adapter whose direct connections check themselves cheaply (outbound-proxy managers
    keep urllib3's own pools and connections), and which hands the client, for each upstream URL
    sent to directly, its connection pool and the path its request line carries — worked out
    once, where requests works both out again for every request (a twentieth of a non-streamed
    request's CPU), though the upstream URLs are a handful fixed by the config."""

    _MAX_REMEMBERED = 1024  # URLs come from the config; a bound all the same

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._direct: dict[str, tuple[Any, str]] = {}  # URL → its pool and request-line path

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPConnectionPool, "https": _HTTPSConnectionPool}

    def pool_and_path(self, url: str) -> tuple[Any, str]:
        """The connection pool for a (normalised) upstream URL sent to directly, and the path its
        request line carries."""
        known = self._direct.get(url)
        if known is not None and known[0].pool is not None:  # urllib3 closes a pool its manager lets go of
            return known
        request = requests.PreparedRequest()
        request.url = url
        pool = self.get_connection_with_tls_context(request, True)
        self.cert_verify(pool, url, True, None)
        if len(self._direct) >= self._MAX_REMEMBERED:
            self._direct.clear()
        known = self._direct[url] = (pool, self.request_url(request, None))
        return known


def as_requests_error(exc: Exception) -> Exception:
    """A failure of urllib3's, as requests' adapter reports it (the classes `classify_network_error`
    reads); anything else unchanged."""
    errors = requests.exceptions
    if isinstance(exc, MaxRetryError):
        reason = exc.reason
        if isinstance(reason, ConnectTimeoutError) and not isinstance(reason, NewConnectionError):
            return errors.ConnectTimeout(exc)
        if isinstance(reason, SSLError):
            return errors.SSLError(exc)
        return errors.ConnectionError(exc)
    if isinstance(exc, ProtocolError | OSError | ClosedPoolError):
        return errors.ConnectionError(exc)
    if isinstance(exc, SSLError):
        return errors.SSLError(exc)
    if isinstance(exc, ReadTimeoutError):
        return errors.ReadTimeout(exc)
    if isinstance(exc, InvalidHeader):
        return errors.InvalidHeader(exc)
    if isinstance(exc, HTTPError):
        return errors.ConnectionError(exc)
    return exc
