"""The embeddings endpoints of every registered protocol that has them (`Protocol.embeddings`:
OpenAI's `POST /v1/embeddings`, Gemini's `:embedContent` and `:batchEmbedContents`), built from
the protocol's `EmbeddingsCodec`.

Thin, like the completion endpoint (proxy.blueprints.completions): the body read (413 over
`max_body_bytes`) and folded with what the URL says, checked by the codec (a 400 naming the field),
the key's model globs (403), its limits (tokens estimated now, charged with the upstream's
`prompt_tokens` when the request ends) and its budgets (the worst case: the estimated input tokens
at the model's input price), then the relay with `operation="embeddings"` and the request's
fallback gate (an embeddings model may fall back to another, as a completion's does). Never streamed. One
`RequestRecord` a request, its endpoint `embeddings`. Names no protocol.
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Blueprint, Response, g, request

from proxy.blueprints.auth import check_model
from proxy.blueprints.completions import admit_spending, arriving_record, recorded
from proxy.blueprints.http import client_key, client_socket, json_body, relay_response
from proxy.blueprints.state import app_state
from proxy.ir.embeddings import estimate_tokens
from proxy.ir.request import Request
from proxy.ops.records import OK
from proxy.protocols import registry
from proxy.protocols.codec import EmbeddingsCodec, Protocol
from proxy.protocols.exchange import EMBEDDINGS, Exchange
from proxy.relay.loop import able_routes

ENDPOINT = EMBEDDINGS  # what usage and metrics file these requests under, and the relay's operation


def _no_ir() -> Request:
    raise ValueError("an embeddings request has no completion IR")


def serve(protocol: Protocol, codec: EmbeddingsCodec, model: str | None, rule: str) -> Response:
    state = app_state()
    record = arriving_record(protocol, ENDPOINT)
    with recorded(state.hooks, record):
        body = codec.body_from_url(json_body(), model, rule)
        codec.validate(body)
        record.model, record.stream = codec.model_of(body), False
        entry = client_key()
        check_model(entry, record.model)
        tokens = estimate_tokens(codec.decode(body))
        state.limiter.admit(entry, record, _no_ir, body, tokens=tokens)
        routes = able_routes(ENDPOINT, state.relay.router.resolve(record.model))
        gate = admit_spending(state, entry, protocol.client, record, routes, lambda: None, lambda: tokens, body,
                              input_only=True)
        ex = Exchange(protocol=protocol.name, body=body, model=record.model, stream=False,
                      request_id=g.request_id, client_socket=client_socket(),
                      request_headers={k.lower(): v for k, v in request.headers.items()}, operation=ENDPOINT)
        result = state.relay.handle(ex, record, gate)
    state.hooks.finish(record, result.status, OK)
    return relay_response(result)


def _view(protocol: Protocol, codec: EmbeddingsCodec, rule: str) -> Callable[..., Response]:
    def create(model: str | None = None) -> Response:
        return serve(protocol, codec, model, rule)

    return create


def embeddings_blueprint() -> Blueprint:
    """One blueprint for every protocol's embeddings routes, registered once."""
    bp = Blueprint(ENDPOINT, __name__)
    for protocol in registry.all_protocols():
        codec = protocol.embeddings
        if codec is None:
            continue
        for n, rule in enumerate(codec.rules):
            bp.add_url_rule(rule, f"{protocol.name}_{n}", _view(protocol, codec, rule), methods=["POST"])
    return bp

