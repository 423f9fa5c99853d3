"""`/v1/responses/{id}` — the OpenAI Responses endpoints beside `POST /v1/responses` (which is
`proxy.blueprints.completions`'): retrieve, delete and list the input items of a stored response.

Stored responses are served from the proxy's store whichever upstream answered (every answer is
kept there, proxy.conversations.responses); deleting one that an upstream keeps too
deletes it there first (proxy.conversations.upstream_copies).
"""

from __future__ import annotations

from flask import Blueprint, Response, g, jsonify, request

from proxy.blueprints.state import app_state
from proxy.conversations.store import ResponseStore, StoredResponse
from proxy.conversations.upstream_copies import delete_upstream_copy
from proxy.errors import ProxyError

bp = Blueprint("responses_store", __name__)


def _store() -> ResponseStore:
    return app_state().response_store


def _stored(response_id: str) -> StoredResponse:
    entry = _store().get(response_id)
    if entry is None or not entry.retrievable:
        raise ProxyError(404, f"No response with id {response_id!r} is stored on this proxy.", "not_found",
                         param="response_id")
    return entry


@bp.get("/v1/responses/<response_id>")
def retrieve(response_id: str) -> Response:
    return jsonify(_stored(response_id).response)


@bp.delete("/v1/responses/<response_id>")
def delete(response_id: str) -> Response:
    entry = _stored(response_id)
    if entry.origin is not None and entry.origin.kept:
        # The upstream stores it too, and would still resolve it as a previous_response_id sent to
        # it as is: a client that deletes a response means it gone there as well.
        relay = app_state().relay
        delete_upstream_copy(relay.transport, relay.pools, relay.secrets, entry.origin, response_id, g.request_id)
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
