"""The endpoints a protocol answers without a completion, beside its main one (`Endpoint` of kind
`local`, as each protocol declares them in the registry): Messages' `POST /v1/messages/count_tokens`
and Gemini's `:countTokens` — the prompt's tokens, counted by the upstream the model routes to when
its protocol can count (proxy.upstream.token_count), else estimated locally. The model the request
names must be one the client's key may use, as for the protocol's main endpoint. Query strings
are ignored (Claude Code adds `?beta=true`).
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Blueprint, Response, g, jsonify
from flask.blueprints import BlueprintSetupState

from proxy.blueprints.auth import check_model
from proxy.blueprints.completions import url_body
from proxy.blueprints.http import client_key, json_body
from proxy.blueprints.state import app_state
from proxy.ir.tokens import estimate_input_tokens
from proxy.protocols import registry
from proxy.protocols.codec import ClientSide, Endpoint

bp = Blueprint("local_endpoints", __name__)


@bp.record
def _routes(setup: BlueprintSetupState) -> None:
    """Every registered protocol's local endpoints (plugins' included), when the app is built."""
    for protocol in registry.all_protocols():
        for n, endpoint in enumerate(protocol.endpoints):
            if endpoint.kind == "local" and (endpoint.answer is not None or endpoint.counted is not None):
                setup.add_url_rule(endpoint.rule, f"{protocol.name}_local_{n}", _view(endpoint, protocol.client),
                                   methods=["POST"])


def _view(endpoint: Endpoint, client: ClientSide) -> Callable[..., Response]:
    def local(model: str | None = None) -> Response:
        # A rule whose URL names the model (Gemini's :countTokens) folds it into the body as the main endpoint does.
        body = json_body() if model is None else url_body(client, model, False)
        if endpoint.counted is not None and endpoint.count_answer is not None:
            req = endpoint.counted(body)
            check_model(client_key(), req.model)  # the same models as the protocol's main endpoint, for the same key
            state = app_state()
            routes = state.relay.router.resolve(req.model)
            counted = state.tokens.count(routes, req, g.request_id)
            return jsonify(endpoint.count_answer(estimate_input_tokens(req) if counted is None else counted))
        assert endpoint.answer is not None
        model_named, out = endpoint.answer(body)
        check_model(client_key(), model_named)
        return jsonify(out)

    return local
