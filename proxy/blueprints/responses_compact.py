"""The endpoints a protocol relays beside its main one (`Endpoint` of kind `relayed`, as each
protocol declares them in the registry): Responses' `POST /v1/responses/compact` — compaction as
OpenAI serves it (v1): the conversation in, the compacted conversation out as `{"output": [...]}` —
the user's messages, then one `compaction` item — on every upstream protocol.

Thin, like the completion endpoint beside it: the body read and checked as a request of the
protocol, then the relay. An upstream of the same protocol gets the request as it is at the
endpoint's own upstream path (passthrough, `Exchange.passthrough_path`); to an upstream of another
protocol it goes as the main endpoint's request would — for compact, a summarisation request whose
answer is made of the summary, sealed (the conversation state, proxy.conversations, and
proxy.protocols.responses.compaction). Records and hooks as for every completion request. Nothing
is stored: a compaction is not a response.
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Blueprint, Response, g
from flask.blueprints import BlueprintSetupState

from proxy import conversations
from proxy.blueprints.completions import admit, arriving_record, recorded
from proxy.blueprints.http import client_key, client_socket, json_body, relay_response
from proxy.blueprints.state import app_state
from proxy.ops.records import OK
from proxy.protocols import registry
from proxy.protocols.codec import Endpoint, Protocol
from proxy.protocols.exchange import Exchange

bp = Blueprint("relayed_endpoints", __name__)


@bp.record
def _routes(setup: BlueprintSetupState) -> None:
    """Every registered protocol's relayed endpoints (plugins' included), when the app is built."""
    for protocol in registry.all_protocols():
        for n, endpoint in enumerate(protocol.endpoints):
            if endpoint.kind == "relayed":
                setup.add_url_rule(endpoint.rule, f"{protocol.name}_relayed_{n}", _view(protocol, endpoint),
                                   methods=["POST"])


def _view(protocol: Protocol, endpoint: Endpoint) -> Callable[[], Response]:
    def relayed() -> Response:
        state = app_state()
        # Filed under its path's name below /v1/ (responses_compact), apart from the main endpoint's.
        record = arriving_record(protocol, endpoint.rule.removeprefix("/v1/").replace("/", "_"))
        with recorded(state.hooks, record):
            body = json_body()
            body.pop("stream", None)  # the answer is one JSON body
            protocol.client.validate(body)
            record.model = body["model"]
            gate = admit(state, client_key(), protocol.client, record, body)
            conversation = conversations.for_request(protocol.client, body, state.response_store,
                                                     compact=endpoint.compacts)
            ex = Exchange(protocol=protocol.name, body=body, model=record.model, stream=False,
                          request_id=g.request_id, client_socket=client_socket(), conversation=conversation,
                          passthrough_path=endpoint.upstream_path)
            result = state.relay.handle(ex, record, gate)
        state.hooks.finish(record, result.status, OK)
        return relay_response(result)

    return relayed
