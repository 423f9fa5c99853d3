"""One attempt: a client's request tried once, on one account of one upstream.

Owns, for every protocol, streaming or not: building the upstream body (passed through, or
translated through the IR; from the conversation state the proxy keeps for the client, as fits
this attempt's upstream and account; then without the fields the upstream is configured not to
take), sending it through the transport, judging the status *before* any byte reaches the client
(the pool's classification says whether another account may do better, and cools or disables
this one), and turning a good answer into the client's: a stream handed to the streaming engine,
or one body translated whole. Every way an attempt ends releases its lease exactly once (a stream
releases it when it closes) and is told to the hooks as one `AttemptRecord` — request id, upstream,
account, status, class, action, elapsed time — which `proxy.ops.log_lines` writes as the attempt's
log line: the relay states facts and formats no line about an attempt. What the answer's encoding
finds out comes back as values — a whole answer's `Answer`, a stream relay's `final` and `dropped`,
read by the stream's end (`proxy.relay.stream_end`) — and the finished response object goes to
the request's conversation state there, never through a hook written into the `Exchange`. An
attempt is given what it uses (`AttemptKit`: transport, pools, clock, hooks, …), not the relay loop.

Must not choose the account or the route, nor decide whether to try again (the loop's, which is
told by `NextAccount`), nor read a socket (the transport's); translates nothing itself (the codecs').
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from proxy.config import Streaming
from proxy.errors import ProxyError, parse_upstream_error, scrub
from proxy.ir.fold import unfold
from proxy.ir.request import Request
from proxy.ir.response import ErrorInfo, Usage
from proxy.ops.hooks import Hooks
from proxy.ops.records import AttemptRecord, AttemptStart, RequestRecord
from proxy.pool.classify import NETWORK_ACTION, NETWORK_CLASS, Verdict
from proxy.pool.pool import AccountPool, Lease
from proxy.protocols import registry
from proxy.protocols.codec import Passthrough, Protocol, UpstreamSide
from proxy.protocols.exchange import EMBEDDINGS, Exchange
from proxy.protocols.sse import dumps
from proxy.protocols.transcode import StreamRelay, Translation
from proxy.relay import embedding_answer
from proxy.relay.first_byte import FirstByteBudget, OutOfTime, Tried, timed_out
from proxy.relay.stream_end import StreamEnd, StreamEnded
from proxy.relay.transport import ClientStream, Transport, UpstreamAnswer, UpstreamCall
from proxy.relay.unsupported_fields import UnsupportedFields
from proxy.routing import Route
from proxy.streaming import EarlyStreamFailure
from proxy.upstream.client import UpstreamNetworkError
from proxy.upstream.outbound import ProxiesExhausted

log = logging.getLogger("proxy.relay")

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}


@dataclass
class RelayResult:
    """The client's answer, for the blueprint to send: a whole body, or a stream to iterate — and
    what the attempt that gave it found out, for the loop to record: the usage of a whole answer
    (a stream's comes when it closes), and whether a stream began to flow."""

    status: int
    headers: dict[str, str]
    body: bytes | ClientStream
    usage: Usage | None = None
    streaming: bool = False  # a stream the engine relays (not a whole answer sent as SSE)


class NextAccount(Exception):
    """This attempt failed in a way another account may not: the loop tries the next one."""

    def __init__(self, info: ErrorInfo, tried: Tried, network: bool = False, action: str = "next") -> None:
        super().__init__(info.message)
        self.info = info  # what the client is told if no account does better
        self.tried = tried  # how this attempt is summed up in a timeout message
        self.network = network  # the upstream could not be reached, or did not answer in time
        self.action = action  # the verdict's action: next | cool | disable, or proxy


@dataclass(frozen=True)
class AttemptKit:
    """What an attempt uses, given by the relay loop: the transport to upstreams, the pools (the
    leased account's, to judge a failure), the clock, the hooks told of every attempt, the secrets
    scrubbed from what upstreams say, the fields each upstream does not take, and the limits of
    an answer (the streaming settings, `max_response_bytes`)."""

    transport: Transport
    pools: Mapping[str, AccountPool]
    clock: Callable[[], float]
    hooks: Hooks
    secrets: tuple[str, ...]
    unsupported: UnsupportedFields
    streaming: Streaming
    max_response_bytes: int


class DecodedOnce:
    """The client's request in the IR, decoded by the first attempt that translates and kept for
    the request's other attempts (every upstream of another protocol is built from the same body)."""

    __slots__ = ("request",)

    def __init__(self) -> None:
        self.request: Request | None = None

    def get(self, decode: Callable[[dict[str, Any]], Request], body: dict[str, Any]) -> Request:
        if self.request is None:
            self.request = decode(body)
        return self.request


@dataclass(frozen=True)
class _Sides:
    """The protocols of one attempt: the client's, the upstream's, and the passthrough when they are
    the same protocol (None: the body is translated through the IR)."""

    client: Protocol
    upstream: Protocol

    @property
    def passthrough(self) -> Passthrough | None:
        return self.upstream.passthrough if self.client is self.upstream else None


def stream_headers(writer: object) -> dict[str, str]:
    """The headers of a streamed answer: SSE's, with the content type the client's writer says when
    it streams something else (Gemini's one JSON array, streamed, without `?alt=sse`)."""
    headers = dict(SSE_HEADERS)
    content_type = getattr(writer, "content_type", None)
    if content_type:
        headers["Content-Type"] = content_type
    return headers


def _upstream_path(side: UpstreamSide, model: str, stream: bool) -> str:
    """Where on the upstream the request goes: the protocol's path, or the one its URL names the model in."""
    return side.path_for(model, stream) if side.path_for is not None else side.path


class Attempt:
    """`ex` tried on the leased account of `route`'s upstream. `run()` returns the client's answer,
    or raises NextAccount (another account may do better) or ProxyError (this is the answer)."""

    __slots__ = ("budget", "decoded", "ex", "kit", "lease", "pool", "request", "route", "sides", "started",
                 "stream_ended", "told")

    def __init__(self, kit: AttemptKit, ex: Exchange, route: Route, lease: Lease, budget: FirstByteBudget,
                 request: RequestRecord | None = None, decoded: DecodedOnce | None = None,
                 stream_ended: StreamEnded | None = None) -> None:
        self.kit, self.ex, self.route, self.lease, self.budget = kit, ex, route, lease, budget
        # The request's record, read by the hooks told of this attempt (who asked, for which model);
        # the attempt never writes it — the loop records what `told` and the result say.
        self.request = request
        self.stream_ended = stream_ended  # the loop's, called once when a stream this attempt began closes
        self.told: AttemptRecord | None = None  # this attempt as the hooks were told of it, once it ended
        self.decoded = decoded if decoded is not None else DecodedOnce()
        self.pool = kit.pools[route.upstream.name]
        # Decided here, once per attempt: the client's body passes through to an upstream of its own
        # protocol, else it is translated (each attempt may be on an upstream of another protocol).
        self.sides = _Sides(registry.get(ex.protocol), registry.get(route.upstream.protocol))
        self.started = 0.0

    def run(self) -> RelayResult:
        ex, upstream, lease, sides = self.ex, self.route.upstream, self.lease, self.sides
        # Client headers travel only to an upstream of the client's own protocol (anthropic-beta, …).
        headers = ex.headers if sides.passthrough is not None else None
        header_wait = upstream.timeouts.header_wait(ex.stream)
        if ex.operation == EMBEDDINGS:
            prepared, path = embedding_answer.request(sides.client, sides.upstream, ex, self.route.model)
            body = dumps(self.kit.unsupported.strip(prepared, upstream.name, upstream.unsupported, {}))
        else:
            body = self._upstream_body()
            path = ex.passthrough_path if sides.passthrough is not None and ex.passthrough_path else \
                _upstream_path(sides.upstream.upstream, self.route.model, ex.stream)
        record = self.request
        if record is not None and (record.capture is not None or record.trace is not None):
            headers = self._watched(record, path, body, headers)
        call = UpstreamCall(upstream, lease.account, path, body, ex.request_id,
                            headers=headers, header_wait=header_wait, first_byte=self.budget)
        self.started = self.kit.clock()
        try:
            answer = self.kit.transport.send(call)
        except OutOfTime:
            # Judged as the header timeout it is: counted, and the account stays in rotation.
            self._log("-", f"{NETWORK_CLASS}:first_byte_total", "fail")
            lease.release(failure=NETWORK_CLASS)
            cut_at = self.kit.clock() - self.started
            raise NextAccount(timed_out(upstream.name, cut_at), network=True,
                              tried=Tried(upstream.name, cut_at)) from None
        except ProxiesExhausted as exhausted:
            # The proxies failed, not the account: it stays in rotation, and returns with a proxy.
            self._log("-", "proxy", NETWORK_ACTION)
            lease.release()
            raise NextAccount(exhausted.info, tried=Tried(upstream.name, None, "proxies failed"),
                              action="proxy") from None
        except UpstreamNetworkError as exc:
            self._log("-", f"{NETWORK_CLASS}:{exc.cause}", NETWORK_ACTION)
            lease.release(failure=NETWORK_CLASS, error=exc.info.message)
            waited = header_wait if exc.cause == "header_timeout" else None
            raise NextAccount(exc.info, network=True, tried=Tried(upstream.name, waited, exc.cause)) from None

        if answer.status >= 300:
            raw = answer.read()
            if record is not None and record.capture is not None:
                record.capture.upstream_answer(answer.status, raw)
            info = parse_upstream_error(answer.status, raw, self.kit.secrets)
            text = raw.decode("utf-8", "replace")
            self._judge(self.pool.classify(answer.status, text), info, answer.headers, text)
            relayed = sides.passthrough.relayed_error if sides.passthrough is not None else None
            raise _client_error(info, raw, relayed, self.kit.secrets)

        if ex.stream and _is_event_stream(answer.headers.get("Content-Type", "")):
            return self._stream(answer)
        return self._embeddings_whole(answer) if ex.operation == EMBEDDINGS else self._whole(answer)

    def _watched(self, record: RequestRecord, path: str, body: bytes,
                 headers: dict[str, str] | None) -> dict[str, str] | None:
        """Tell the request's request log and trace that this attempt is being sent; the headers to
        send, with the trace context of the attempt's span added."""
        upstream = self.route.upstream
        start = AttemptStart(record.attempts + 1, upstream.name, upstream.protocol, upstream.base_url,
                             self.lease.account.id, self.route.model, path, body)
        if record.capture is not None:
            record.capture.attempt_started(start)
        if record.trace is not None:
            headers = {**(headers or {}), **record.trace.attempt_started(start)}
        return headers

    def _upstream_body(self) -> bytes:
        ex, route, sides = self.ex, self.route, self.sides
        client_body = ex.body
        if ex.conversation is not None:
            # Whether the upstream can be sent the client's references as they are depends on
            # which upstream account this attempt uses; so does the origin the answer is kept with.
            client_body = ex.conversation.body_for(route.upstream, self.lease.account.id)
        if sides.passthrough is not None:
            prepared = sides.passthrough.prepare_request(ex, client_body, route.model, route.upstream)
        else:
            ir = self.decoded.get(sides.client.client.decode_request, client_body)
            prepared = sides.upstream.upstream.encode_request(ir, route.model, route.upstream)
        if ex.ir is None and self.decoded.request is not None:
            # The codecs of this attempt see the IR (a client encoder estimates from it).
            self.ex = ex = replace(ex, ir=self.decoded.request)
        # Fields this upstream rejects leave here, whichever path built the body.
        return dumps(self.kit.unsupported.strip(prepared, route.upstream.name, route.upstream.unsupported,
                                                  sides.upstream.upstream.nested_fields))

    def _embeddings_whole(self, answer: UpstreamAnswer) -> RelayResult:
        raw = self._read_raw(answer)
        try:
            body, usage = embedding_answer.answer(self.sides.client, self.sides.upstream, self.ex, raw,
                                                  self.route.upstream.name)
        except ProxyError:
            self.lease.release(failure="upstream_error")
            self._log(answer.status, "upstream_error", "fail")
            raise
        self.lease.release(usage=usage)
        self._log(answer.status, "ok", "return")
        return RelayResult(200, {"Content-Type": "application/json"}, body, usage)

    def _stream(self, answer: UpstreamAnswer) -> RelayResult:
        ex, route, lease, sides = self.ex, self.route, self.lease, self.sides
        relay: StreamRelay
        if sides.passthrough is not None:
            relay = sides.passthrough.stream_relay(ex, route.upstream)
        else:
            assert ex.ir is not None
            decoder = sides.upstream.upstream.stream_decoder(ex.ir, route.upstream)
            relay = Translation(decoder, sides.client.client.stream_encoder(ex))
        end = StreamEnd(ex, route, lease, relay, sides.passthrough is not None, self.kit.clock, self.started,
                        self.stream_ended)
        capture = self.request.capture if self.request is not None else None
        body = answer.stream(relay, self.kit.streaming, ex.client_socket, end.close, end.keep if end.keeps else None,
                             capture)
        try:
            body.prime(self.budget.deadline, self.budget.no_event(route.upstream.name))
        except EarlyStreamFailure as early:
            # Nothing reached the client yet: a failure in the stream's first event is judged like an HTTP one.
            try:
                self._judge(self.pool.classify(early.info.status, early.info.message), early.info, {})
            finally:
                body.close()
            raise ProxyError.from_info(early.info) from None
        except BaseException:
            body.close()
            raise
        self._log(200, "ok", "stream", relay.dropped)
        return RelayResult(200, stream_headers(relay), body, streaming=True)

    def _whole(self, answer: UpstreamAnswer) -> RelayResult:
        ex, lease, sides = self.ex, self.lease, self.sides
        doc = self._read_json(answer)
        embedded = sides.upstream.upstream.error_in_body(doc, self.kit.secrets)
        if embedded is not None:
            # A 200 whose body is an error (some compatible servers do this): judge it as that error.
            self._judge(self.pool.classify(embedded.status, embedded.message), embedded, answer.headers)
            raise _client_error(embedded, None, None, self.kit.secrets)
        decoded = sides.upstream.upstream.decode_response(doc, self.route.upstream)
        lease.release(usage=decoded.usage)
        if self.request is not None:  # what the answer says of itself, for traces
            self.request.response_id, self.request.response_model = decoded.id or None, decoded.model or None
            self.request.finish_reason = decoded.finish_reason
        if ex.stream:
            # Asked to stream, answered with one body: give the client the stream it expects —
            # translated, so the answer it gets (and keeps) is not the upstream's own object.
            encoder = sides.client.client.stream_encoder(ex)
            frames = [f for ev in unfold(decoded) for f in encoder.encode(ev)]
            self._keep(encoder.final, passthrough=False)
            self._log(answer.status, "ok", "return as stream", encoder.dropped)
            return RelayResult(200, stream_headers(encoder), b"".join(frames), decoded.usage)
        if sides.passthrough is not None:
            out = sides.passthrough.normalise_response(doc, ex)
        elif decoded.error is not None:
            # An answer that is a failure (Gemini's blocked prompt, a malformed function call): the
            # client gets it as its protocol's error, not as an empty answer.
            self._log(answer.status, decoded.error.kind, "fail")
            raise ProxyError.from_info(decoded.error)
        else:
            out = sides.client.client.encode_response(decoded, ex)
        self._keep(out.final, passthrough=sides.passthrough is not None)
        self._log(answer.status, "ok", "return", out.dropped)
        return RelayResult(200, {"Content-Type": "application/json"}, dumps(out.body), decoded.usage)

    def _keep(self, final: dict[str, Any] | None, passthrough: bool) -> None:
        """The finished response object to the request's conversation state, which keeps it."""
        if self.ex.conversation is not None and final is not None:
            self.ex.conversation.keep(final, self.route.upstream, self.lease.account.id, passthrough)

    def _read_raw(self, answer: UpstreamAnswer) -> bytes:
        name, limit = self.route.upstream.name, self.kit.max_response_bytes
        raw = answer.read(limit + 1)
        if self.request is not None and self.request.capture is not None:
            self.request.capture.upstream_answer(answer.status, raw)
        if len(raw) > limit:
            self.lease.release(failure="upstream_error")
            raise ProxyError(502, f"upstream {name!r} answered with more than {limit} bytes, the "
                                  "limit for a non-streamed answer (max_response_bytes)", "upstream_error")
        return raw

    def _read_json(self, answer: UpstreamAnswer) -> dict[str, Any]:
        name, raw = self.route.upstream.name, self._read_raw(answer)
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            self.lease.release(failure="upstream_error")
            raise ProxyError(502, f"upstream {name!r} returned a body that is not a JSON object", "upstream_error")
        return doc

    def _judge(self, verdict: Verdict, info: ErrorInfo, headers: Mapping[str, str], body: str = "") -> None:
        """Account for a failed attempt and carry out the verdict; raise NextAccount unless it is `fail`."""
        reason = f"{verdict.klass}: HTTP {info.status}: {info.message[:200]}"
        self.lease.release(failure=verdict.klass, error=reason)
        self.pool.apply(self.lease, verdict, reason, headers, body)
        self._log(info.status, verdict.klass, verdict.action)
        if verdict.action != "fail":
            raise NextAccount(info, action=verdict.action,
                              tried=Tried(self.route.upstream.name, None, f"HTTP {info.status}"))

    def _log(self, status: Any, klass: str, action: str, dropped: Mapping[str, int] | None = None) -> None:
        """The attempt, for the hooks — its log line among them (proxy.ops.log_lines) — and kept as
        `told`, which the loop records. `dropped`: what the client's encoder left out."""
        ex, upstream, account = self.ex, self.route.upstream.name, self.lease.account.id
        elapsed = self.kit.clock() - self.started
        self.told = AttemptRecord(ex.request_id, upstream, account, status if isinstance(status, int) else None,
                                  klass, action, elapsed, self.request, dict(dropped) if dropped else None,
                                  self.route.model, self.request.attempts + 1 if self.request is not None else 1)
        self.kit.hooks.attempt(self.told)


def _is_event_stream(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


def _client_error(info: ErrorInfo, raw: bytes | None,
                  relayed: Callable[[dict[str, Any], ErrorInfo], dict[str, Any] | None] | None,
                  secrets: tuple[str, ...]) -> ProxyError:
    """The upstream's error for the client. On the same-protocol path an error body in that
    protocol's envelope reaches the client as the upstream worded it, in that envelope (`relayed`,
    the protocol's own), secrets scrubbed; otherwise the error is re-expressed in the client's
    protocol."""
    err = ProxyError.from_info(info)
    if raw is not None and relayed is not None:
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        body = relayed(doc, info) if isinstance(doc, dict) else None
        if body is not None:
            err.raw_body = scrub(dumps(body).decode("utf-8"), secrets).encode("utf-8")
    return err
