"""HTTP to the upstreams: one `requests` session per worker, credentials per protocol, and
network failures turned into classified errors.

Owns every outbound HTTP call (completions and model lists). The session's connection pool is
sized for gevent (hundreds of concurrent streams share it, so it never blocks waiting for a free
connection) and it does not consult proxy environment variables per request unless the config
says `trust_env: true`. Also tells an outbound proxy's own failure (cause `proxy`) from the
upstream's failure behind a working proxy. Nothing here decides *what* to send or whether to retry.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import requests
from requests.structures import CaseInsensitiveDict
from urllib3 import Timeout
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from proxy import __version__
from proxy.config import Timeouts, Upstream
from proxy.config.values import redact_proxy_url
from proxy.ir.response import ErrorInfo
from proxy.protocols import registry
from proxy.upstream.pooled import Adapter, as_requests_error

log = logging.getLogger(__name__)

USER_AGENT = f"llm-proxy/{__version__}"
MAX_ERROR_BODY = 1 << 20  # read at most this much of an upstream error body


class UpstreamNetworkError(Exception):
    """The upstream could not be reached or did not answer in time. `info` says how, for the client."""

    def __init__(self, info: ErrorInfo, cause: str, detail: str = "") -> None:
        super().__init__(info.message)
        self.info = info
        # refused | reset | dns | tls | connect_timeout | header_timeout | malformed | other, or
        # proxy: the outbound proxy failed (`detail` says how) and the upstream was never reached.
        self.cause = cause
        self.detail = detail


@dataclass(frozen=True)
class Target:
    """Where and how one request to an upstream is sent, with which account's key."""

    upstream_name: str
    base_url: str
    timeouts: Timeouts
    required_headers: Mapping[str, str]  # the protocol's own (a passthrough client's values win)
    extra_headers: Mapping[str, str]  # the upstream's `headers:` from the config
    auth_headers: Mapping[str, str] = field(repr=False)  # the account's key, as the protocol carries it
    proxy: str | None = field(default=None, repr=False)  # may carry credentials
    # How long to wait for the response headers, when not `timeouts.read` (a streaming request's
    # `first_byte`); the body is then read with `timeouts.read` as usual.
    header_timeout: float | None = None

    @classmethod
    def of(cls, upstream: Upstream, api_key: str, proxy: str | None = None, *, timeouts: Timeouts | None = None,
           header_timeout: float | None = None) -> Target:
        """The one place a Target is built: the upstream's protocol says how the key travels and
        which headers it requires."""
        side = registry.get(upstream.protocol).upstream
        return cls(upstream.name, upstream.base_url, timeouts or upstream.timeouts, side.required_headers,
                   upstream.headers, side.auth_headers(api_key), proxy, header_timeout)

    @property
    def header_wait(self) -> float:
        return self.timeouts.read if self.header_timeout is None else self.header_timeout


class UpstreamClient:
    def __init__(self, trust_env: bool = False, pool_maxsize: int = 1024) -> None:
        self.session = requests.Session()
        self.session.trust_env = trust_env
        # pool_block=False: under gevent a blocked pool would stall unrelated requests; an extra
        # connection beyond the pool size is opened and discarded instead.
        self._adapter = Adapter(pool_connections=64, pool_maxsize=pool_maxsize, max_retries=0, pool_block=False)
        self.session.mount("http://", self._adapter)
        self.session.mount("https://", self._adapter)
        self.session.headers.clear()
        self._urls: dict[str, str] = {}  # URL → as requests normalises it (IDNA, quoting)

    def send(
        self,
        target: Target,
        path: str,
        body: bytes | None,
        *,
        stream: bool,
        method: str = "POST",
        request_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> requests.Response:
        """Send one request; return once the status line and headers have arrived."""
        all_headers = {
            "User-Agent": USER_AGENT,
            "Accept": "text/event-stream" if stream else "application/json",
            # Compressed SSE would be held back by the decompressor; plain bytes stream as they come.
            "Accept-Encoding": "identity" if stream else "gzip, deflate",
            **target.required_headers,
            **target.extra_headers,
            **(headers or {}),
            **target.auth_headers,
        }
        if body is not None:
            all_headers["Content-Type"] = "application/json"
        if request_id:
            all_headers["X-Request-Id"] = request_id
        url = target.base_url + path
        timeout = (target.timeouts.connect, target.header_wait)
        try:
            if self.session.trust_env:  # HTTP(S)_PROXY / NO_PROXY / netrc: let requests merge them in
                proxies = {"http": target.proxy, "https": target.proxy} if target.proxy else {}
                resp = self.session.request(method, url, data=body, headers=all_headers, stream=stream,
                                            proxies=proxies, timeout=timeout, allow_redirects=False)
            elif target.proxy:  # through the outbound proxy's own pool manager, which requests' adapter keeps
                prepared = self._prepare(method, url, body, all_headers)
                resp = self._adapter.send(prepared, stream=stream, timeout=timeout,
                                          proxies={"http": target.proxy, "https": target.proxy})
            else:
                resp = self._direct(method, url, body, all_headers, timeout)
        except requests.exceptions.RequestException as exc:
            raise classify_network_error(exc, target) from None
        if target.proxy and resp.status_code == 407:  # no upstream says this: the proxy wants credentials
            resp.close()
            raise _proxy_error(target, "asks for credentials (HTTP 407)")
        if target.header_wait != target.timeouts.read:
            _read_body_with(resp, target.timeouts.read)
        return resp

    def _prepare(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> requests.PreparedRequest:
        """What Request.prepare makes of our requests: bytes bodies and headers we built ourselves
        need no checking, and each upstream URL is normalised once."""
        prepared = requests.PreparedRequest()
        prepared.method = method
        prepared.url = self._normalised(url)
        prepared.headers = CaseInsensitiveDict(_with_length(method, body, headers))
        prepared.body = body
        return prepared

    def _direct(self, method: str, url: str, body: bytes | None, headers: dict[str, str],
                timeout: tuple[float, float]) -> requests.Response:
        """Straight through urllib3's connection pool for the URL — the one requests' adapter uses —
        without the adapter's preparation and its response's cookie jar, header copy and encoding
        guess, none of which an upstream call uses. urllib3's failures are raised as the requests
        exceptions the adapter raises for them, which `classify_network_error` reads."""
        pool, line = self._adapter.pool_and_path(self._normalised(url))
        try:
            raw = pool.urlopen(method=method, url=line, body=body, headers=_with_length(method, body, headers),
                               redirect=False, assert_same_host=False, preload_content=False, decode_content=False,
                               retries=self._adapter.max_retries, timeout=Timeout(connect=timeout[0], read=timeout[1]))
        except Exception as exc:
            raise as_requests_error(exc) from exc
        response = requests.Response()
        response.status_code = raw.status
        response.headers = raw.headers  # urllib3's HTTPHeaderDict: case-insensitive, as requests' is
        response.raw = raw
        response.url = url
        response.reason = raw.reason
        return response

    def _normalised(self, url: str) -> str:
        """`url` as requests normalises it (IDNA, quoting); each upstream URL once."""
        known = self._urls.get(url)
        if known is None:
            prepared = requests.PreparedRequest()
            prepared.prepare_url(url, None)
            assert prepared.url is not None
            known = self._urls[url] = prepared.url
        return known


def _with_length(method: str, body: bytes | None, headers: dict[str, str]) -> dict[str, str]:
    """`headers` with the Content-Length our bytes body (or its absence) calls for: both send
    paths build requests themselves, without requests' preparation that would add it."""
    if body is not None:
        headers["Content-Length"] = str(len(body))
    elif method not in ("GET", "HEAD"):
        headers["Content-Length"] = "0"
    return headers


def _read_body_with(resp: requests.Response, timeout: float) -> None:
    """Give the socket the body's read timeout once the headers came under a shorter one: a
    streaming request answered with a whole JSON body reads it like any non-streamed answer."""
    connection = getattr(resp.raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        sock.settimeout(timeout)


def classify_network_error(exc: BaseException, target: Target) -> UpstreamNetworkError:
    """Describe a failure to talk to the upstream, without leaking anything secret."""
    name = f"upstream {target.upstream_name!r}"
    text = str(exc).lower()
    proxy_fault = _proxy_fault(exc, target.proxy, text)
    if proxy_fault is not None:
        return _proxy_error(target, proxy_fault)
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return _network(504, "timeout", "connect_timeout",
                        f"{name} did not accept a connection within {target.timeouts.connect:g}s")
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return _network(504, "timeout", "header_timeout", f"{name} sent no response within {target.header_wait:g}s")
    if isinstance(exc, requests.exceptions.InvalidHeader | requests.exceptions.ChunkedEncodingError
                  | requests.exceptions.ContentDecodingError | requests.exceptions.InvalidURL):
        return _network(502, "upstream_error", "malformed",
                        f"{name} sent a malformed response ({type(exc).__name__})")
    if isinstance(exc, requests.exceptions.SSLError):
        return _network(502, "upstream_error", "tls", f"TLS handshake with {name} failed")
    if "name or service not known" in text or "nodename nor servname" in text or "resolve" in text \
            or "getaddrinfo" in text or "temporary failure in name resolution" in text:
        return _network(502, "upstream_error", "dns", f"cannot resolve the host of {name}")
    if "refused" in text:
        return _network(502, "upstream_error", "refused", f"{name} refused the connection")
    if "reset" in text or "aborted" in text or "remotedisconnected" in text or "closed connection" in text:
        return _network(502, "upstream_error", "reset", f"{name} closed the connection before answering")
    return _network(502, "upstream_error", "other", f"cannot reach {name}: {type(exc).__name__}")


def _proxy_fault(exc: BaseException, proxy: str | None, text: str) -> str | None:
    """How the outbound proxy failed, if the failure is the proxy's and not the upstream's behind it:
    connecting to it (refused, timed out, its name unresolved), a tunnel it would not open, a
    forward proxy closing without an answer, a SOCKS handshake or a connection it could not make.
    None for failures after the proxy passed the request on."""
    if proxy is None:
        return None
    if not isinstance(exc, requests.exceptions.ProxyError):
        # SOCKS: every connection is made by the proxy, and urllib3 reports its failures as failures
        # to connect; anything later is the upstream's.
        reason = getattr(exc.args[0], "reason", None) if exc.args else None
        if not (proxy.startswith("socks") and isinstance(reason, NewConnectionError | ConnectTimeoutError)):
            return None
    tunnel = re.search(r"tunnel connection failed: (\d{3})", text)
    if tunnel:
        return f"would not open a tunnel to the upstream (HTTP {tunnel.group(1)})"
    if "refused" in text:
        return "refused the connection"
    if "timed out" in text or "timeout" in text:
        return "did not answer in time"
    if "resolve" in text or "name or service not known" in text or "getaddrinfo" in text:
        return "cannot be resolved"
    if "closed" in text or "reset" in text or "remotedisconnected" in text or "aborted" in text:
        return "closed the connection"
    return f"failed ({type(exc).__name__})"


def _proxy_error(target: Target, how: str) -> UpstreamNetworkError:
    assert target.proxy is not None
    message = f"outbound proxy {redact_proxy_url(target.proxy)} for upstream {target.upstream_name!r} {how}"
    return UpstreamNetworkError(ErrorInfo(kind="upstream_error", message=message, status=502), "proxy", how)


def _network(status: int, kind: str, cause: str, message: str) -> UpstreamNetworkError:
    return UpstreamNetworkError(ErrorInfo(kind=kind, message=message, status=status), cause)


def read_capped(resp: requests.Response, limit: int = MAX_ERROR_BODY) -> bytes:
    """Read at most `limit` bytes of a body (an error body must not exhaust memory)."""
    try:
        data = resp.raw.read(limit, decode_content=True)
    except Exception as exc:  # a body that breaks off is still an error we can report
        log.debug("reading upstream error body failed: %s", type(exc).__name__)
        data = b""
    finally:
        resp.close()
    return data or b""
