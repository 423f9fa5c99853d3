"""The Anthropic Messages protocol: `/v1/messages` (and, later, `protocol: anthropic` upstreams)."""

from __future__ import annotations

from proxy.exchange import Exchange
from proxy.ir.tokens import estimate_input_tokens
from proxy.protocols.codec import ClientSide
from proxy.protocols.messages import request, response
from proxy.protocols.messages.errors import error_body
from proxy.protocols.messages.stream_encode import MessagesStreamEncoder


def _stream_encoder(ex: Exchange) -> MessagesStreamEncoder:
    return MessagesStreamEncoder(ex.model, estimate_input_tokens(ex.ir) if ex.ir is not None else 0)


CLIENT = ClientSide(
    decode_request=request.decode,
    encode_response=lambda resp, ex: response.encode(resp, ex.model),
    stream_encoder=_stream_encoder,
    error_body=error_body,
)

__all__ = ["CLIENT"]
