"""An embeddings attempt's body, path and answer (`Exchange.operation == "embeddings"`), for
proxy.relay.attempt, which does everything else of the attempt as for a completion (the lease,
the status judged, retries, the hooks' record, the request log's copies).

Owns choosing between the two ways through, from the protocols' `EmbeddingsCodec`s:
- passthrough (client and upstream speak the same protocol): the client's body with only the
  model mapped, to the path the client's call names; the upstream's answer relayed byte for
  byte, read only for its `prompt_tokens`;
- translation: the client's body decoded to proxy.ir.embeddings and encoded for the upstream; its
  answer decoded (the vectors kept as the upstream's number texts) and written for the client.
Either way the usage is the upstream's input tokens, or the proxy's estimate when it gives none.
Must not lease, send, judge a status or log (the attempt's); names no protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.errors import ProxyError
from proxy.ir.embeddings import estimate_tokens
from proxy.ir.response import Usage
from proxy.protocols.codec import EmbeddingsCodec, Protocol
from proxy.protocols.exchange import Exchange


@dataclass(frozen=True)
class _Sides:
    client: EmbeddingsCodec
    upstream: EmbeddingsCodec
    passthrough: bool


def _sides(client: Protocol, upstream: Protocol) -> _Sides:
    # The relay keeps only routes whose upstream protocol serves embeddings; the edge only serves
    # the endpoints of a protocol that has them.
    assert client.embeddings is not None and upstream.embeddings is not None
    return _Sides(client.embeddings, upstream.embeddings, client.name == upstream.name)


def request(client: Protocol, upstream: Protocol, ex: Exchange, model: str) -> tuple[dict[str, Any], str]:
    """The upstream's body and the path it goes to, for the model as the upstream knows it."""
    s = _sides(client, upstream)
    if s.passthrough:
        return s.upstream.prepare(ex.body, model), s.upstream.passthrough_path(ex.body, model)
    ir = s.client.decode(ex.body)
    return s.upstream.encode_request(ir, model), s.upstream.path_for(ir, model)


def answer(client: Protocol, upstream: Protocol, ex: Exchange, raw: bytes, upstream_name: str) -> tuple[bytes, Usage]:
    """The client's answer and the request's usage, from the upstream's 200 body."""
    s = _sides(client, upstream)
    if s.passthrough:
        body, tokens = raw, s.upstream.prompt_tokens(raw)
        if tokens is None:
            try:
                s.upstream.decode_answer(raw)  # without a count, make sure it is an answer at all
            except (ValueError, AttributeError) as exc:
                raise _unreadable(upstream_name, exc) from None
    else:
        try:
            decoded = s.upstream.decode_answer(raw)
        except (ValueError, AttributeError) as exc:
            raise _unreadable(upstream_name, exc) from None
        tokens = decoded.prompt_tokens
        if tokens is None:
            tokens = estimate_tokens(s.client.decode(ex.body))
            decoded = type(decoded)(decoded.vectors, tokens)
        body = s.client.encode_answer(decoded, ex.body, ex.model)
    if tokens is None:
        tokens = estimate_tokens(s.client.decode(ex.body))
    return body, Usage(input_tokens=tokens)


def _unreadable(name: str, exc: Exception) -> ProxyError:
    return ProxyError(502, f"upstream {name!r} answered an embeddings request with a body that is not an "
                           f"embeddings answer ({exc})", "upstream_error")
