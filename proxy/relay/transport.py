"""The relay's one way to an upstream: send one request with one account's key, get its answer.

Owns the seam between the relay and the network. `Transport.send(call)` sends one `UpstreamCall`
and returns an `UpstreamAnswer` as soon as the status line and headers have arrived: its status,
its headers, and its body — read whole up to a cap, or handed to the streaming engine, which then
owns it. Failures to get an answer at all come back as the exceptions the relay already knows,
classified: `UpstreamNetworkError` (refused, reset, timed out, malformed, …), `ProxiesExhausted`
(no outbound proxy of the account got the request through) and `OutOfTime` (the client's
first-byte deadline cut the wait for the headers).

`HTTPTransport` is the one the service runs: the worker's `requests` session (its pooled,
reused connections and its header timeouts) through the account's outbound proxies in turn, the
wait for headers cut at the first-byte deadline. The relay's tests give it a fake instead, and so
run the retry loop without a socket.

Must not decide anything: which account, whether a status deserves another account and what the
client is told are the relay's. It lives in the relay's package, not in `proxy.upstream`, because
it hands the body to the streaming engine, which sits above the upstream client.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import requests

from proxy.config import Account, Streaming, Upstream
from proxy.ir.response import ErrorInfo
from proxy.pool.pool import AccountPool
from proxy.protocols.transcode import StreamRelay
from proxy.relay.first_byte import FirstByteBudget
from proxy.streaming import StreamingBody, StreamOutcome, StreamTap
from proxy.upstream.client import MAX_ERROR_BODY, Target, UpstreamClient, read_capped
from proxy.upstream.outbound import send_via_proxies


@dataclass(slots=True)
class UpstreamCall:
    """One request to an upstream, made with one account's key. (Not frozen: a frozen dataclass
    costs a microsecond more to build, on every attempt.)"""

    upstream: Upstream
    account: Account
    path: str  # under the upstream's base_url
    body: bytes | None  # JSON, ready to send
    request_id: str
    method: str = "POST"
    # Sent as a stream (`Accept: text/event-stream`, no compression), the body left unread for the
    # caller; False asks for a JSON answer, compressed if the upstream likes.
    stream: bool = True
    headers: dict[str, str] | None = None  # the client's own headers, for an upstream of its protocol
    header_wait: float | None = None  # seconds to wait for the response headers; None: `timeouts.read`
    first_byte: FirstByteBudget | None = None  # the client's first-byte deadline, which cuts that wait


class ClientStream(Protocol):
    """A streamed answer on its way to the client: the WSGI body the blueprint returns."""

    def prime(self, first_byte_by: float | None = None, late: ErrorInfo | None = None) -> None:
        """Run the stream up to its first frame before the response is committed (see StreamingBody)."""

    def __iter__(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class UpstreamAnswer(Protocol):
    """An upstream's answer whose headers have arrived; its body not yet read."""

    status: int
    headers: Mapping[str, str]  # looked up case-insensitively, as HTTP headers are

    def read(self, limit: int = MAX_ERROR_BODY) -> bytes:
        """The body, at most `limit` bytes (an error body or a whole answer must not exhaust
        memory), whatever of it came before it broke off; closes the answer."""

    def stream(self, relay: StreamRelay, settings: Streaming, client_socket: socket.socket | None,
               on_close: Callable[[StreamOutcome], None], on_end: Callable[[], None] | None = None,
               tap: StreamTap | None = None) -> ClientStream:
        """Hand the body to the streaming engine, which relays it through `relay`, calls `on_end`
        once when the stream has finished (before its last frames go out, where it may wait), and
        closes the answer when the client's stream ends (then calls `on_close` once). `tap`, when
        the request log keeps the request, is given the upstream's bytes and the client's frames."""


class Transport(Protocol):
    def send(self, call: UpstreamCall) -> UpstreamAnswer:
        """Send `call`; return once the status line and headers have arrived."""


class HTTPTransport:
    """Upstream calls over the worker's `requests` session, through the account's outbound proxies."""

    def __init__(self, client: UpstreamClient, pools: Mapping[str, AccountPool]) -> None:
        self.client = client
        self.pools = pools  # each account's outbound proxies, and which of them are cooling

    def send(self, call: UpstreamCall) -> UpstreamAnswer:
        client, budget = self.client, call.first_byte
        # No deadline (a non-streamed request, a call of the proxy's own): no timer to set.
        cut = budget.cut if budget is not None and budget.deadline is not None else None

        def via(proxy: str | None) -> requests.Response:
            target = Target.of(call.upstream, call.account.api_key, proxy, header_timeout=call.header_wait)
            # Each proxy's wait for headers is cut at the same deadline: turns through the
            # account's proxies share the time the client has left.
            with cut() if cut is not None else _NO_CUT:
                return client.send(target, call.path, call.body, stream=call.stream, method=call.method,
                                   request_id=call.request_id, headers=call.headers)

        return _HTTPAnswer(send_via_proxies(self.pools[call.upstream.name], call.account, via, call.request_id))


_NO_CUT = contextlib.nullcontext()  # reusable: it holds no state


class _HTTPAnswer:
    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: requests.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers

    def read(self, limit: int = MAX_ERROR_BODY) -> bytes:
        return read_capped(self._response, limit)

    def stream(self, relay: StreamRelay, settings: Streaming, client_socket: socket.socket | None,
               on_close: Callable[[StreamOutcome], None], on_end: Callable[[], None] | None = None,
               tap: StreamTap | None = None) -> ClientStream:
        return StreamingBody(self._response, relay, settings, client_socket, on_close, on_end, tap)
