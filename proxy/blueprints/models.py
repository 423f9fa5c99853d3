"""`GET /v1/models` and `GET /v1/models/<id>`, in a shape both OpenAI and Anthropic SDKs accept —
only the models the client's key may use (its `models` in `client_keys`) — plus the
unauthenticated `/` and `/healthz` that probes and Claude Code's startup `HEAD /` hit."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flask import Blueprint, Response, g, jsonify, request
from flask.blueprints import BlueprintSetupState

from proxy import __version__
from proxy.blueprints.auth import check_model
from proxy.blueprints.http import client_key
from proxy.blueprints.state import app_state
from proxy.errors import ProxyError
from proxy.protocols import registry
from proxy.upstream.catalog import Model, model_list, model_object

bp = Blueprint("models", __name__)

Lister = Callable[[list[Any], str | None, Mapping[str, str]], dict[str, Any]]


@bp.record
def _catalog_routes(setup: BlueprintSetupState) -> None:
    """The model lists protocols serve in their own shape (`catalog` endpoints: Gemini's /v1beta/models)."""
    for protocol in registry.all_protocols():
        for n, endpoint in enumerate(protocol.endpoints):
            if endpoint.kind == "catalog" and endpoint.catalog is not None:
                setup.add_url_rule(endpoint.rule, f"{protocol.name}_catalog_{n}", _catalog_view(endpoint.catalog),
                                   methods=["GET"])


def _catalog_view(lister: Lister) -> Callable[..., Response]:
    def catalog(model: str | None = None) -> Response:
        if model is not None:
            check_model(client_key(), model.removeprefix("models/"))
        return jsonify(lister(_allowed_models(), model, request.args))

    return catalog


def _allowed_models() -> list[Model]:
    key = client_key()
    return [m for m in app_state().catalog.models(g.request_id) if key is None or key.allows(m.id)]


@bp.get("/v1/models")
def list_models() -> Response:
    return jsonify(model_list(_allowed_models()))  # what this key may use


@bp.get("/v1/models/<path:model_id>")
def get_model(model_id: str) -> Response:
    check_model(client_key(), model_id)
    for model in app_state().catalog.models(g.request_id):
        if model.id == model_id:
            return jsonify(model_object(model))
    raise ProxyError(404, f"The model {model_id!r} does not exist on this proxy; GET /v1/models lists them.",
                     "not_found", code="model_not_found", param="model")


@bp.get("/")
@bp.get("/healthz")
def health() -> Response:
    return jsonify({"service": "llm-proxy", "version": __version__, "status": "ok"})
