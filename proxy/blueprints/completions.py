"""The endpoint each protocol's clients post their requests to (`/v1/chat/completions`,
`/v1/messages`, `/v1/responses`, and any protocol registered besides), built from the protocol.

Thin and the same for every protocol: parse the body, let the protocol check it (a 400 that names
the field) and say which model and whether it streams, refuse a model the client's key may not
use (403) or a request over one of the key's limits (429, proxy.limits), keep the client headers the protocol
forwards to an upstream of its own kind, attach the conversation state it keeps on the proxy if it
has any, and hand the request to the relay. Everything protocol-specific comes from its
`ClientSide`; nothing here names a protocol.

Every request is described by one `RequestRecord` (proxy.ops.records), opened here and handed to
the hooks exactly once: here for a whole answer or an error, by the relay when a stream ends.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from flask import Blueprint, Response, g, request

from proxy import conversations
from proxy.blueprints.auth import check_model
from proxy.blueprints.fallback_gate import fallback_gate
from proxy.blueprints.http import (
    client_key,
    client_key_name,
    client_socket,
    json_body,
    presented,
    raw_body,
    relay_response,
)
from proxy.blueprints.state import AppState, app_state
from proxy.config.keys import ClientKey
from proxy.errors import ProxyError
from proxy.ir.request import Request
from proxy.limits.limiter import estimate
from proxy.ops.hooks import HookSet
from proxy.ops.log_lines import ENVIRON_KEY
from proxy.ops.records import OK, Arrival, RequestRecord
from proxy.protocols.codec import ClientSide, Protocol
from proxy.protocols.exchange import Exchange
from proxy.relay.fallbacks import FallbackGate
from proxy.routing import Route


def admit(state: AppState, entry: ClientKey | None, client: ClientSide, record: RequestRecord,
          body: dict[str, Any]) -> FallbackGate | None:
    """What the client's key allows, checked before any upstream: a model outside its `models`
    (403), a request over one of its `limits` (429; else reserved until the request ends,
    proxy.limits), over its own or its groups' USD budgets (the protocol's "out of credit" answer;
    else its worst case reserved until it ends, proxy.budgets). Every way in to a completion calls
    it — this endpoint, the Responses WebSocket, compaction — so no transport skips them. Returns
    the gate the relay asks before it falls back to another model (None: no fallbacks configured)."""
    check_model(entry, record.model)
    decoded = functools.cache(lambda: client.decode_request(body))
    record.decoded = decoded
    state.limiter.admit(entry, record, decoded, body)
    return admit_spending(state, entry, client, record, state.relay.router.resolve(record.model),
                          lambda: _or_none(decoded), lambda: estimate(decoded, body), body)


def admit_spending(state: AppState, entry: ClientKey | None, client: ClientSide, record: RequestRecord,
                   routes: Sequence[Route], request: Callable[[], Request | None], tokens: Callable[[], int],
                   body: dict[str, Any], input_only: bool = False) -> FallbackGate | None:
    """The USD budgets the key falls under (its worst case over `routes` held, or the refusal in
    the status the client's protocol answers it with), and the gate its fallbacks pass — for a
    completion (`admit`) and an embeddings request (`input_only`: priced by its input alone) alike."""
    try:
        config = state.keys.effective(state.config) if state.keys is not None else state.config  # runtime groups
        state.budgets.admit(config, entry, record, routes, request, tokens, body, input_only)
    except ProxyError as err:
        status = client.kind_status.get(err.info.kind)
        if status is not None:  # the status this protocol's API answers the kind with
            err.info.status = status
        raise
    return fallback_gate(state, config, entry, record, request, tokens, body, input_only)


def _or_none(decode: Callable[[], Request]) -> Request | None:
    try:
        return decode()
    except Exception:  # a body its decoder cannot take: sized by its length alone
        return None


@contextmanager
def recorded(hooks: HookSet, record: RequestRecord) -> Iterator[None]:
    """An error raised inside closes the request's record — its status and kind, a 500 for anything
    unexpected — and tells the hooks, then goes on up to be answered."""
    try:
        yield
    except ProxyError as err:
        hooks.finish(record, err.info.status, err.info.kind)
        raise
    except Exception:
        hooks.finish(record, 500, "api_error")
        raise


def arriving_record(protocol: Protocol, endpoint: str | None = None) -> RequestRecord:
    """The record of the request being handled, as it arrives (its model is read from the body
    later), kept where the access line finds it (proxy/serving/access_log.py). `endpoint`: what
    usage and metrics file it under, the protocol's name for its completion endpoint."""
    record = RequestRecord(g.request_id, client_key_name(), protocol.name, model="", stream=False,
                           client_address=request.remote_addr, endpoint=endpoint or protocol.name)
    request.environ[ENVIRON_KEY] = record
    hooks = app_state().hooks
    if hooks.watch_arrivals:
        hooks.request_arrived(record, arrival())
    return record


def arrival() -> Arrival:
    """The request as it arrived, for the concerns that watch requests from their start."""
    return Arrival(request.method, request.path, request.query_string.decode("latin-1"),
                   {k.lower(): v for k, v in request.headers.items()}, raw_body, presented())


def completions_blueprint(protocol: Protocol) -> Blueprint:
    client = protocol.client
    bp = Blueprint(protocol.name, __name__)

    def serve(body_of: Callable[[], dict[str, Any]]) -> Response:
        state = app_state()
        record = arriving_record(protocol)
        with recorded(state.hooks, record):
            body = body_of()
            client.validate(body)
            record.model, record.stream = client.model_and_stream(body)
            gate = admit(state, client_key(), client, record, body)
            headers = {name: value for name in client.forwarded_headers if (value := request.headers.get(name))}
            conversation = conversations.for_request(client, body, state.response_store)
            ex = Exchange(protocol=protocol.name, body=body, model=record.model, stream=record.stream,
                          request_id=g.request_id, headers=headers, client_socket=client_socket(),
                          conversation=conversation,
                          request_headers={k.lower(): v for k, v in request.headers.items()})
            result = state.relay.handle(ex, record, gate)
        if isinstance(result.body, bytes):  # a stream's record ends with it
            state.hooks.finish(record, result.status, OK)
        return relay_response(result)

    if not client.url_routes:
        bp.add_url_rule(client.path, "create", lambda: serve(json_body), methods=["POST"])
    for n, route in enumerate(client.url_routes):
        bp.add_url_rule(route.rule, f"create_{n}", _url_view(serve, client, route.stream), methods=["POST"])
    return bp


def url_body(client: ClientSide, model: str, stream: bool) -> dict[str, Any]:
    """The posted body with what the URL says folded in by the protocol (the model, whether it streams)."""
    assert client.body_from_url is not None
    return client.body_from_url(json_body(), model, stream, request.args)


def _url_view(serve: Callable[[Callable[[], dict[str, Any]]], Response], client: ClientSide,
              stream: bool) -> Callable[..., Response]:
    def create(model: str) -> Response:
        return serve(lambda: url_body(client, model, stream))

    return create
