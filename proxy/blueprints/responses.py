"""`/v1/responses` — the OpenAI Responses endpoints: create, and retrieve / delete / list the input
items of a stored response.

Thin: parse and check the body, expand the stored conversation (`previous_response_id`,
`item_reference`), decode, and hand it to the relay with a hook that stores the finished response
unless the client sent `store: false`. When every upstream serving the model speaks Responses
itself, the body is relayed as it is and the upstream keeps the conversation state.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request

from proxy.blueprints.http import client_socket, json_body, relay_response
from proxy.errors import ProxyError
from proxy.exchange import Exchange
from proxy.protocols.responses.conversation import expand
from proxy.protocols.responses.request import decode, validate
from proxy.response_store import ResponseStore, StoredResponse

bp = Blueprint("responses", __name__)


def _store() -> ResponseStore:
    store: ResponseStore = current_app.extensions["llm_proxy"].response_store
    return store


@bp.post("/v1/responses")
def create() -> Response:
    body = json_body()
    validate(body)
    relay = current_app.extensions["llm_proxy"].relay
    ex = Exchange(protocol="responses", body=body, model=body["model"], stream=bool(body.get("stream")),
                  request_id=g.request_id, client_socket=client_socket())
    routes = relay.router.resolve(body["model"])
    if not (routes and all(route.upstream.protocol == "responses" for route in routes)):
        # Upstreams that are not Responses have no conversation state: the proxy keeps it. (A
        # Responses upstream gets the body as it is and resolves previous_response_id itself.)
        store = _store()
        conversation = expand(body, store)
        keep = body.get("store", True) is not False

        def on_complete(final: dict[str, Any]) -> None:
            if keep:
                store.put(final, conversation.new_items, body.get("previous_response_id"))

        ex.ir, ex.on_complete = decode(body, conversation.items), on_complete
    return relay_response(relay.handle(ex))


def _stored(response_id: str) -> StoredResponse:
    entry = _store().get(response_id)
    if entry is None:
        raise ProxyError(404, f"No response with id {response_id!r} is stored on this proxy.", "not_found",
                         param="response_id")
    return entry


@bp.get("/v1/responses/<response_id>")
def retrieve(response_id: str) -> Response:
    return jsonify(_stored(response_id).response)


@bp.delete("/v1/responses/<response_id>")
def delete(response_id: str) -> Response:
    _stored(response_id)
    _store().delete(response_id)
    return jsonify({"id": response_id, "object": "response.deleted", "deleted": True})


@bp.get("/v1/responses/<response_id>/input_items")
def input_items(response_id: str) -> Response:
    items = list(_stored(response_id).input_items)
    if request.args.get("order", "desc") == "desc":
        items.reverse()
    return jsonify({"object": "list", "data": items, "has_more": False,
                    "first_id": items[0].get("id") if items else None,
                    "last_id": items[-1].get("id") if items else None})
