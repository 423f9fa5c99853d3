"""Counting a prompt's tokens with the upstream that would serve it, where its protocol can say
(Gemini's `:countTokens`): behind Messages' `/v1/messages/count_tokens` and Gemini's own
`:countTokens`, whichever protocol the client speaks.

Owns that one call: the first route of the model whose upstream protocol counts tokens, one of its
accounts (a lease, released at once: a count is not a completion and is not retried), the protocol's
request and answer. Anything that goes wrong — no such route, no account free, a network failure,
an error status, an answer it cannot read — gives None, and the caller falls back to the proxy's
local estimate (proxy.ir.tokens): a count is advice, never worth failing a client for.
"""

from __future__ import annotations

import json
import logging

import requests

from proxy.ir.request import Request
from proxy.pool.pool import AccountPool
from proxy.protocols import registry
from proxy.protocols.codec import UpstreamSide
from proxy.routing import Route
from proxy.upstream.client import Target, UpstreamClient, UpstreamNetworkError, read_capped
from proxy.upstream.outbound import ProxiesExhausted, send_via_proxies

log = logging.getLogger(__name__)


class TokenCounter:
    def __init__(self, pools: dict[str, AccountPool], client: UpstreamClient) -> None:
        self._pools = pools
        self._client = client

    def count(self, routes: list[Route], req: Request, request_id: str | None = None) -> int | None:
        """The upstream's count of `req`'s prompt tokens, or None to estimate locally."""
        for route in routes:
            side = registry.get(route.upstream.protocol).upstream
            if side.count_tokens is not None and side.read_count is not None:
                return self._ask(route, side, req, request_id)
        return None

    def _ask(self, route: Route, side: UpstreamSide, req: Request, request_id: str | None) -> int | None:
        assert side.count_tokens is not None and side.read_count is not None
        path, body = side.count_tokens(req, route.model, route.upstream)
        pool = self._pools[route.upstream.name]
        lease = pool.lease(set())
        if lease is None:
            return None
        data = json.dumps(body).encode()

        def send(proxy: str | None) -> requests.Response:
            target = Target.of(route.upstream, lease.account.api_key, proxy)
            return self._client.send(target, path, data, stream=True, request_id=request_id)

        try:
            resp = send_via_proxies(pool, lease.account, send, request_id)
        except (UpstreamNetworkError, ProxiesExhausted) as exc:
            lease.release()
            log.info("token count on upstream %s: %s; estimating locally", route.upstream.name, exc.info.message)
            return None
        raw = read_capped(resp, 1 << 20)
        lease.release()
        if resp.status_code != 200:
            log.info("token count on upstream %s: HTTP %d; estimating locally", route.upstream.name, resp.status_code)
            return None
        try:
            return side.read_count(json.loads(raw))
        except ValueError:
            return None
