"""The endpoints a protocol answers locally, beside its main one (`Endpoint` of kind `local`, as
each protocol declares them in the registry): Messages' `POST /v1/messages/count_tokens`, a
local estimate of the prompt's tokens. The model the request names must be one the client's key
may use, as for the protocol's main endpoint. Query strings are ignored (Claude Code adds
`?beta=true`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, jsonify
from flask.blueprints import BlueprintSetupState

from proxy.blueprints.auth import check_model
from proxy.blueprints.http import client_key, json_body
from proxy.protocols import registry

bp = Blueprint("local_endpoints", __name__)


@bp.record
def _routes(setup: BlueprintSetupState) -> None:
    """Every registered protocol's local endpoints (plugins' included), when the app is built."""
    for protocol in registry.all_protocols():
        for n, endpoint in enumerate(protocol.endpoints):
            if endpoint.kind == "local" and endpoint.answer is not None:
                setup.add_url_rule(endpoint.rule, f"{protocol.name}_local_{n}", _view(endpoint.answer),
                                   methods=["POST"])


def _view(answer: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]) -> Callable[[], Response]:
    def local() -> Response:
        model, out = answer(json_body())
        check_model(client_key(), model)  # the same models as the protocol's main endpoint, for the same key
        return jsonify(out)

    return local
