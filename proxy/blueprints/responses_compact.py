"""`POST /v1/responses/compact` — compaction as OpenAI serves it (v1): the conversation in, the
compacted conversation out as `{"output": [...]}` — the user's messages, then one `compaction`
item — on every upstream protocol.

Thin, like the completion endpoint beside it: the body read and checked as a Responses request,
then the relay. A Responses upstream gets the request as it is at its own `/responses/compact`
(passthrough, `Exchange.passthrough_path`); to a Chat or Messages upstream it goes as a
summarisation request, and the answer is made of the summary, sealed (the conversation state,
proxy.protocols.responses.conversation, and proxy.protocols.responses.compaction). Records and
hooks as for every completion request. Nothing is stored: a compaction is not a response.
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, g, request

from proxy.blueprints.completions import admit, recorded
from proxy.blueprints.http import client_key, client_key_name, client_socket, json_body, relay_response
from proxy.ops.log_lines import ENVIRON_KEY
from proxy.ops.records import OK, RequestRecord
from proxy.protocols import registry
from proxy.protocols.exchange import Exchange
from proxy.protocols.responses.conversation import ResponsesConversation

bp = Blueprint("responses_compact", __name__)

UPSTREAM_PATH = "/responses/compact"


@bp.post("/v1/responses/compact")
def compact() -> Response:
    state = current_app.extensions["llm_proxy"]
    protocol = registry.get("responses")
    record = RequestRecord(g.request_id, client_key_name(), protocol.name, model="", stream=False)
    request.environ[ENVIRON_KEY] = record  # for the access line (proxy/serving/access_log.py)
    with recorded(state.hooks, record):
        body = json_body()
        body.pop("stream", None)  # the answer is one JSON body
        protocol.client.validate(body)
        record.model = body["model"]
        admit(state, client_key(), protocol.client, record, body)
        conversation = ResponsesConversation(body, state.response_store, compact=True)
        ex = Exchange(protocol=protocol.name, body=body, model=record.model, stream=False, request_id=g.request_id,
                      client_socket=client_socket(), conversation=conversation, passthrough_path=UPSTREAM_PATH)
        result = state.relay.handle(ex, record)
    state.hooks.finish(record, result.status, OK)
    return relay_response(result)
