"""Deleting, at the upstream, the copy of a response that a Responses upstream keeps itself.

Owns one call — `DELETE {base_url}/responses/{id}` with the account that created the response (an
upstream's store is per account, as far as the proxy can know) — and what its answer means for the
client's `DELETE /v1/responses/{id}`. The proxy's own copy is the caller's to drop. Does IO through
the relay's transport, given with the pools and secrets it needs (not the relay); never retries on
another account (no other account holds it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from urllib.parse import quote

from proxy.conversations.store import Origin
from proxy.errors import ProxyError, parse_upstream_error
from proxy.pool.pool import AccountPool
from proxy.relay.transport import Transport, UpstreamCall
from proxy.upstream.client import UpstreamNetworkError
from proxy.upstream.outbound import ProxiesExhausted

log = logging.getLogger("proxy.blueprints.upstream_copies")  # its name before it moved: log lines unchanged


def delete_upstream_copy(transport: Transport, pools: Mapping[str, AccountPool], secrets: tuple[str, ...],
                         origin: Origin, response_id: str, request_id: str) -> None:
    """Delete the upstream's copy, or raise a 502 saying why it could not be — the caller then
    keeps its own copy, so the client may simply try again. Already gone there (404) counts as
    deleted. An upstream or account no longer configured cannot be asked: that is logged, and the
    proxy's copy goes anyway. `secrets`: the accounts' keys, scrubbed from what the upstream says."""
    pool = pools.get(origin.upstream)
    state = pool.get(origin.account) if pool is not None else None
    if pool is None or state is None:
        log.warning("response %s: upstream %s account %s is no longer configured; its copy there stays",
                    response_id, origin.upstream, origin.account)
        return
    upstream = pool.upstream
    where = f"upstream {upstream.name!r} could not delete its copy of response {response_id!r}"

    call = UpstreamCall(upstream, state.account, "/responses/" + quote(response_id, safe=""), None, request_id,
                        method="DELETE", stream=False)
    try:  # through the account's outbound proxies, as every call made with its key
        answer = transport.send(call)
    except (UpstreamNetworkError, ProxiesExhausted) as exc:
        raise ProxyError(502, f"{where}: {exc.info.message}. It is still stored; try again.",
                         "upstream_error") from None
    raw = answer.read()
    log.info("delete upstream copy rid=%s upstream=%s account=%s status=%s", request_id, upstream.name,
             origin.account, answer.status)
    if answer.status < 300 or answer.status == 404:
        return
    info = parse_upstream_error(answer.status, raw, secrets)
    raise ProxyError(502, f"{where} (HTTP {info.status}: {info.message}). It is still stored; try again.",
                     "upstream_error")
