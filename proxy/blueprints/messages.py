"""`POST /v1/messages/count_tokens` — the Anthropic Messages endpoint beside `/v1/messages` (which
is `proxy.blueprints.completions`'): a local estimate of the prompt's tokens, for a model the
client's key may use. Claude Code adds
`?beta=true`; query strings are ignored.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from proxy.blueprints.auth import check_model
from proxy.blueprints.http import client_key, json_body
from proxy.ir.tokens import estimate_input_tokens
from proxy.protocols.messages.request import decode

bp = Blueprint("messages_count_tokens", __name__)


@bp.post("/v1/messages/count_tokens")
def count_tokens() -> Response:
    request = decode(json_body(), count_tokens=True)
    check_model(client_key(), request.model)  # the same models as /v1/messages itself, for the same key
    return jsonify({"input_tokens": estimate_input_tokens(request)})
