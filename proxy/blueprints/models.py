"""`GET /v1/models` and `GET /v1/models/<id>`, in a shape both OpenAI and Anthropic SDKs accept —
only the models the client's key may use (its `models` in `client_keys`) — with the fields of every
protocol that lists models in a shape of its own merged in (Gemini's `models` / `name`: google-genai 3
lists at `/v1/models`), and those protocols' own list endpoints (`/v1beta/models`); plus the
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
from proxy.protocols.codec import Protocol
from proxy.upstream.catalog import Model, model_list, model_object

bp = Blueprint("models", __name__)

Lister = Callable[[list[Any], str | None, Mapping[str, str]], dict[str, Any]]


@bp.record
def _catalog_routes(setup: BlueprintSetupState) -> None:
    """The model lists protocols serve in their own shape (`catalog` endpoints: Gemini's /v1beta/models)."""
    for protocol in registry.all_protocols():
        for n, endpoint in enumerate(protocol.endpoints):
            if endpoint.kind == "catalog" and endpoint.catalog is not None:
                # POST on a model's URL is a call the protocol does not have (`:embedContent`): a 404
                # naming the calls it has, rather than a 405 saying to use GET.
                methods = ["GET", "POST"] if "<path:model>" in endpoint.rule else ["GET"]
                setup.add_url_rule(endpoint.rule, f"{protocol.name}_catalog_{n}",
                                   _catalog_view(endpoint.catalog, protocol), methods=methods)


def _catalog_view(lister: Lister, protocol: Protocol) -> Callable[..., Response]:
    def catalog(model: str | None = None) -> Response:
        if request.method == "POST":
            calls = sorted({rule.rpartition(":")[2] for rule in registry.url_rules(protocol)})
            raise ProxyError(404, f"{request.path} is not a call this proxy serves; it serves "
                                  f"{', '.join(calls)} on {protocol.title} models.", "not_found")
        if model is not None:
            check_model(client_key(), model.removeprefix("models/"))
        return jsonify(lister(_allowed_models(), model, request.args))

    return catalog


def _listers(one: bool) -> list[Lister]:
    """Every protocol's catalog shape, for the shared `/v1/models` answers: a list, or one model."""
    return [e.catalog for p in registry.all_protocols() for e in p.endpoints
            if e.kind == "catalog" and e.catalog is not None and ("<path:model>" in e.rule) == one]


def _allowed_models() -> list[Model]:
    key = client_key()
    return [m for m in app_state().catalog.models(g.request_id) if key is None or key.allows(m.id)]


@bp.get("/v1/models")
def list_models() -> Response:
    models = _allowed_models()  # what this key may use
    body = model_list(models)
    for lister in _listers(one=False):  # other protocols' shapes in the same answer (Gemini's `models`)
        body.update(lister(models, None, request.args))
    return jsonify(body)


@bp.get("/v1/models/<path:model_id>")
def get_model(model_id: str) -> Response:
    check_model(client_key(), model_id)
    models = app_state().catalog.models(g.request_id)
    for model in models:
        if model.id == model_id:
            body = model_object(model)
            for lister in _listers(one=True):  # other protocols' fields in the same object (Gemini's `name`)
                body.update(lister(models, model_id, request.args))
            return jsonify(body)
    raise ProxyError(404, f"The model {model_id!r} does not exist on this proxy; GET /v1/models lists them.",
                     "not_found", code="model_not_found", param="model")


@bp.get("/")
@bp.get("/healthz")
def health() -> Response:
    return jsonify({"service": "llm-proxy", "version": __version__, "status": "ok"})
