"""`GET /v1/models` and `GET /v1/models/<id>`, in a shape both OpenAI and Anthropic SDKs accept —
only the models the client's key may use (its `models` in `client_keys`) — plus the
unauthenticated `/` and `/healthz` that probes and Claude Code's startup `HEAD /` hit."""

from __future__ import annotations

from flask import Blueprint, Response, g, jsonify

from proxy import __version__
from proxy.blueprints.auth import check_model
from proxy.blueprints.http import client_key
from proxy.blueprints.state import app_state
from proxy.errors import ProxyError
from proxy.upstream.catalog import model_list, model_object

bp = Blueprint("models", __name__)


@bp.get("/v1/models")
def list_models() -> Response:
    key = client_key()
    models = app_state().catalog.models(g.request_id)
    return jsonify(model_list([m for m in models if key is None or key.allows(m.id)]))  # what this key may use


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
