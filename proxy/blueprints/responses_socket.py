"""A protocol's main endpoint as a WebSocket (`Endpoint` of kind `socket`, as each protocol declares
them in the registry): `GET /v1/responses`, the Responses API's WebSocket mode, which Codex uses
with OpenAI's own provider and with any provider configured `supports_websockets = true`.

Owns one connection's life: the upgrade (after the same key check as HTTP, in the edge's
before-request hook; its 101 carries the request id and Codex's `x-codex-turn-state`), then one
`response.create` frame after another, each run exactly as `POST /v1/responses` with `stream: true`
runs — the same `Exchange`, the same relay and retry loop, pool, streaming engine (keepalives,
idle deadline), records and hooks — its events sent one per frame (the SSE framing unwrapped by
the endpoint's `frames`, proxy.protocols.responses.websocket), and an error the HTTP path would
have answered with a status sent as an error frame with that status. A response's conversation state goes to the
proxy's response store like any other, so the next turn — on this socket or another — chains on it.

A client that closes the socket mid-response is noticed by the connection's reader at once: the
relay's wait for an upstream is interrupted, or the stream is told to end (`hang_up`), and the
upstream connection and the account's lease are released as for an HTTP client that hangs up.

Must not build requests, retry, translate or frame events itself (the relay, the codecs and the
streaming engine do); frame shapes are the protocol's (its endpoint's `frames`).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

import gevent
from flask import Blueprint, Flask, Response, current_app, g, request
from flask.blueprints import BlueprintSetupState

from proxy import conversations, logs
from proxy.blueprints.auth import presented_key
from proxy.blueprints.completions import admit
from proxy.blueprints.http import client_entry, client_key_name
from proxy.blueprints.socket_server import BadUpgrade, ConnectionClosed, SocketServer
from proxy.blueprints.state import AppState, app_state
from proxy.errors import ProxyError
from proxy.ops.records import OK, Arrival, RequestRecord
from proxy.protocols import registry
from proxy.protocols.codec import Protocol
from proxy.protocols.exchange import Exchange
from proxy.relay.loop import RelayResult
from proxy.streaming import ClientGone, StreamingBody

log = logging.getLogger("proxy.websocket")

bp = Blueprint("responses_socket", __name__)

TURN_STATE = "x-codex-turn-state"
GOING_AWAY = 1001  # the WebSocket close code for a server going down: clients reconnect
_OPEN: weakref.WeakSet[ResponsesSocket] = weakref.WeakSet()  # this worker's open sockets


def close_all_sockets() -> int:
    """A graceful stop has begun: close every socket with 1001 (going away) — an idle one now, one
    with a response in progress when that response has ended (the worker's stream deadline still
    applies) — so clients reconnect to a worker that stays, instead of holding this one until
    `graceful_timeout`. Returns how many sockets were told."""
    sockets = list(_OPEN)
    for sock in sockets:
        sock.going_away()
    return len(sockets)


@bp.record
def _routes(setup: BlueprintSetupState) -> None:
    """Every registered protocol's socket endpoints (plugins' included), when the app is built."""
    for protocol in registry.all_protocols():
        for n, endpoint in enumerate(protocol.endpoints):
            if endpoint.kind == "socket":
                setup.add_url_rule(endpoint.rule, f"{protocol.name}_socket_{n}", _view(protocol, endpoint.frames),
                                   methods=["GET"], websocket=True)


def _view(protocol: Protocol, frames: Any) -> Callable[[], Response]:
    def socket() -> Response:
        ResponsesSocket(current_app, protocol, frames).serve(request.environ)
        return _Handled()

    return socket


class _Handled(Response):
    """The connection was the socket's: gunicorn must write nothing more on it. (Raising
    StopIteration from the WSGI call is how gunicorn's workers are told, as flask-sock does.)"""

    def __call__(self, environ: Any, start_response: Any) -> Any:
        raise StopIteration


class ResponsesSocket:
    def __init__(self, app: Flask, protocol: Protocol, frames: Any) -> None:
        self.app = app
        self.protocol = protocol
        self.frames = frames  # the protocol's WebSocket framing (proxy.protocols.responses.websocket)
        self.socket_id: str = g.request_id
        self.key_name = client_key_name()
        self.client_address: str | None = request.environ.get("REMOTE_ADDR")  # after proxy/serving/forwarded.py
        # Checked again for every response: a reload may have disabled the key or narrowed its models.
        self._key = presented_key(request.headers.get("x-api-key"), request.headers.get("authorization"))
        client = self.protocol.client
        self.forwarded = {name: value for name in client.forwarded_headers if (value := request.headers.get(name))}
        self.path = request.path
        self.headers = {k.lower(): v for k, v in request.headers.items()}  # the upgrade's, for the request log
        self._turn_texts: list[bytes] | None = None  # what a turn the request log keeps sent, when not a stream
        self.turns = 0
        self.received: Counter[str] = Counter()  # client frames, by type, for the closing log line
        self.sent = 0  # frames sent
        self.ws: SocketServer | None = None
        self._relaying: Any = None  # the greenlet waiting in the relay for an upstream, if it is
        self._stream: StreamingBody | None = None  # the stream being sent, if one is
        self._busy = False  # a frame is being answered
        self._leaving = False  # close after the response in progress (going_away)

    @property
    def state(self) -> AppState:
        """The app's state as it is now: each response, like each HTTP request, starts on the config
        in force when it arrives (a reload swaps the state, proxy.serving.reconfigure)."""
        return app_state(self.app)

    def serve(self, environ: dict[str, Any]) -> None:
        turn_state = request.headers.get(TURN_STATE) or secrets.token_hex(16)
        settings = self.state.config.streaming
        try:
            self.ws = SocketServer(environ, {"x-request-id": self.socket_id, TURN_STATE: turn_state},
                                   on_close=self._closed, ping_interval=settings.keepalive_interval,
                                   max_message_size=self.state.config.max_body_bytes)
        except BadUpgrade as bad:
            raise ProxyError(bad.status, f"Not a valid WebSocket upgrade ({bad.reason}). GET /v1/responses with "
                                         "'Upgrade: websocket' opens the Responses WebSocket; POST /v1/responses "
                                         "creates a response over HTTP.", headers=bad.headers) from None
        log.info("websocket open rid=%s key=%s", self.socket_id, self.key_name)
        _OPEN.add(self)
        try:
            while not self._leaving:
                data = self.ws.receive()
                if data is None:
                    continue
                self._busy = True
                try:
                    self._frame(data)
                finally:
                    self._busy = False
            self._close_going_away()
        except ConnectionClosed:
            pass
        finally:
            _OPEN.discard(self)
            received = ",".join(f"{kind}:{n}" for kind, n in sorted(self.received.items())) or "-"
            log.info("websocket closed rid=%s responses=%d received=%s sent=%d", self.socket_id, self.turns,
                     received, self.sent)
            with contextlib.suppress(ConnectionClosed):
                self.ws.close()
            logs.request_id.set(self.socket_id)

    # ------------------------------------------------------------ one frame, one response

    def _frame(self, data: str | bytes) -> None:
        self.turns += 1
        rid = f"{self.socket_id}-{self.turns}"
        logs.request_id.set(rid)
        state = self.state  # read once: the response runs on the config in force when it arrived
        record = RequestRecord(rid, self.key_name, self.protocol.name, model="", stream=True,
                               client_address=self.client_address, endpoint=self.protocol.name)
        if state.hooks.watch_arrivals:  # the request log, tracing: each turn is a request of its own
            raw = data.encode() if isinstance(data, str) else data
            state.hooks.request_arrived(record, Arrival("WEBSOCKET", self.path, "", self.headers, lambda: raw,
                                                        self._key))
        try:
            self._answer_turn(state, data, record, rid)
        finally:
            if record.capture is not None:  # what the turn sent: a stream's frames came through its tap
                sent = b"\n".join(self._turn_texts) if self._turn_texts else None
                record.capture.client_answer(record.status or 200, {}, sent)
            self._turn_texts = None

    def _answer_turn(self, state: AppState, data: str | bytes, record: RequestRecord, rid: str) -> None:
        self._turn_texts = [] if record.capture is not None else None
        try:
            frame = self._read(data)
            if frame["type"] == self.frames.PROCESSED:
                self.turns -= 1  # an acknowledgement, not a request
                return
            result = self._create(state, frame, record, rid)
        except ProxyError as err:
            state.hooks.finish(record, err.info.status, err.info.kind)
            if err.info.status != 499:
                self._send(self.frames.error_frame(err, {"x-request-id": rid}))
            return
        except (ClientGone, ConnectionClosed):
            return  # the client left: nothing to answer
        except Exception:
            log.exception("unhandled error in a websocket response")
            state.hooks.finish(record, 500, "api_error")
            self._send(self.frames.error_frame(self.frames.unexpected(
                f"Internal error in the proxy (request id {rid}); the proxy's log has the details."),
                {"x-request-id": rid}))
            return
        if result is not None:
            self._relay_to_socket(state, result, record)

    def _read(self, data: str | bytes) -> dict[str, Any]:
        try:
            frame = self.frames.read_frame(data)
        except ProxyError:
            self.received["invalid"] += 1
            raise
        self.received[frame["type"]] += 1
        return frame

    def _create(self, state: Any, frame: dict[str, Any], record: RequestRecord, rid: str) -> RelayResult | None:
        client = self.protocol.client
        body, generate = self.frames.create_body(frame)
        entry = client_entry(state, self._key)  # revoked, expired or disabled since it connected: refused
        if entry is None or entry.disabled:
            self._leaving = True  # the key no longer opens this proxy: answered, then the socket closes
            raise ProxyError(401, "This connection's API key is no longer accepted by the proxy (its config, or "
                                  "its key API: revoked, expired or disabled); connect again with a valid key.",
                             "authentication")
        client.validate(body)
        record.model = body["model"]
        gate = admit(state, entry, client, record, body)  # the key's models (403) and limits (429), as over HTTP
        log.debug("response.create rid=%s generate=%s previous_response_id=%s store=%s input=%s", rid, generate,
                  "yes" if body.get("previous_response_id") else "no", body.get("store", True),
                  ",".join(str(i.get("type") or "message") for i in body.get("input") or [] if isinstance(i, dict)))
        conversation = conversations.for_request(client, body, state.response_store, keep_unstored=True)
        if not generate:
            if conversation is not None:
                conversation.items()  # a previous_response_id it names must exist, as for a real turn
            log.info("warm-up rid=%s (generate: false): answered without an upstream", rid)
            events, final = self.frames.warm_up(body, record.model)
            if conversation is not None:
                conversation.keep_unanswered(final)
            for event in events:
                self._send(event)
            state.hooks.finish(record, 200, OK)
            return None
        ex = Exchange(protocol=self.protocol.name, body=body, model=record.model, stream=True, request_id=rid,
                      headers=self.forwarded, client_socket=None, conversation=conversation)
        assert self.ws is not None
        self._relaying = gevent.getcurrent()
        try:
            if not self.ws.connected:
                raise ClientGone
            result: RelayResult = state.relay.handle(ex, record, gate)
            return result
        finally:
            self._relaying = None

    def _relay_to_socket(self, state: Any, result: RelayResult, record: RequestRecord) -> None:
        unwrap = self.frames.EventFrames()
        if isinstance(result.body, bytes):  # an upstream that answered whole, unfolded into events
            state.hooks.finish(record, result.status, OK)  # answered, as for HTTP, whether or not the client stays
            for event in unwrap.feed(result.body):
                self._send_text(event)
            return
        body = result.body
        self._turn_texts = None  # a stream's frames reach the request log through its tap
        self._stream = body if isinstance(body, StreamingBody) else None
        try:
            for sse in body:
                for event in unwrap.feed(sse):
                    self._send_text(event)
        except (ConnectionClosed, OSError):
            pass  # the client left: closing the stream counts it so and frees the upstream
        finally:
            self._stream = None
            body.close()  # the record and the lease are settled here, as for an HTTP stream

    # ------------------------------------------------------------ the connection

    def going_away(self) -> None:
        self._leaving = True
        if not self._busy:
            self._close_going_away()

    def _close_going_away(self) -> None:
        if self.ws is None:
            return
        with contextlib.suppress(ConnectionClosed, OSError):
            self.ws.close(GOING_AWAY, "The proxy is restarting; connect again.")
        self.ws.event.set()  # wake the receive() this socket's greenlet may be parked in

    def _send(self, event: dict[str, Any]) -> None:
        self._send_text(self.frames.text(event))

    def _send_text(self, text: str) -> None:
        assert self.ws is not None
        self.ws.send(text)
        self.sent += 1
        if self._turn_texts is not None:
            self._turn_texts.append(text.encode())

    def _closed(self) -> None:
        """Run by the connection's reader greenlet when the connection ends: whatever this socket
        is waiting for on the client's behalf ends now."""
        stream = self._stream
        if stream is not None:
            stream.hang_up()
        waiting = self._relaying
        if waiting is not None:
            gevent.get_hub().loop.run_callback(self._abandon, waiting)

    def _abandon(self, waiting: Any) -> None:
        # Run by the hub, so `waiting` is parked in the relay's wait for its upstream: the throw
        # lands there, where the relay releases the account (as for an HTTP client's hang-up).
        if self._relaying is waiting:
            waiting.throw(ClientGone)
