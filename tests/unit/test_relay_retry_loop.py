"""The relay's retry loop without a socket: the real codecs, pools and router, and a fake transport
(`proxy.relay.transport.Transport`) that answers each account as a test scripts it, on a fake clock
that moves only when a scripted upstream "waits".

What a client sees and what the pool learns: failover on the statuses and network errors the pool's
classification says another account may survive, `max_attempts`, routes in config order across
upstreams of different protocols, the 503 that says why no account is available (with Retry-After),
the 504s that say what was tried when the first byte did not come, an upstream's error relayed in
the client's envelope, a 200 whose body is an error — and no lease left held, whatever the path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from proxy.config import parse
from proxy.errors import ProxyError
from proxy.ir.response import ErrorInfo
from proxy.pool.pool import AccountPool
from proxy.pool.state import ACTIVE, COOLING, DISABLED, AccountState
from proxy.protocols import registry
from proxy.protocols.exchange import Exchange
from proxy.protocols.sse import SSEParser
from proxy.protocols.transcode import StreamRelay
from proxy.relay.first_byte import OutOfTime
from proxy.relay.loop import Relay, RelayResult
from proxy.relay.transport import UpstreamCall
from proxy.routing import Router
from proxy.streaming import ClientGone, EarlyStreamFailure, StreamOutcome
from proxy.upstream.client import MAX_ERROR_BODY, UpstreamNetworkError
from proxy.upstream.outbound import ProxiesExhausted

# ---------------------------------------------------------------- the fakes


class Clock:
    """Monotonic seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class FakeStream:
    """The streaming engine's part, in memory: the upstream's SSE bytes through the attempt's real
    relay, with the engine's contract — `prime` raises EarlyStreamFailure when the stream fails
    before its first frame, `on_end` runs once the stream finished, and `close` reports the outcome once."""

    def __init__(self, data: bytes, relay: StreamRelay, on_close: Callable[[StreamOutcome], None],
                 on_end: Callable[[], None] | None = None) -> None:
        self.data, self.relay, self.on_close, self.on_end = data, relay, on_close, on_end
        self.frames: list[bytes] = []
        self.closed = False

    def prime(self, first_byte_by: float | None = None, late: ErrorInfo | None = None) -> None:
        parser, failed_at = SSEParser(), None
        for ev in [*parser.feed(self.data), *parser.flush()]:
            produced = self.relay.feed(ev)
            if self.relay.failed is not None and failed_at is None:
                failed_at = len(self.frames)
            self.frames += produced
        self.frames += self.relay.close()
        if self.relay.failed is not None and failed_at == 0:
            raise EarlyStreamFailure(self.relay.failed)
        if self.relay.done and self.on_end is not None:
            self.on_end()

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.frames)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        outcome = StreamOutcome()
        outcome.frames, outcome.usage, outcome.error = len(self.frames), self.relay.usage, self.relay.failed
        self.on_close(outcome)


@dataclass
class Answer:
    """An upstream's answer whose headers have come."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    streams: list[FakeStream] = field(default_factory=list)

    def read(self, limit: int = MAX_ERROR_BODY) -> bytes:
        return self.body[:limit]

    def stream(self, relay: StreamRelay, settings: Any, client_socket: Any,
               on_close: Callable[[StreamOutcome], None], on_end: Callable[[], None] | None = None,
               tap: Any = None) -> FakeStream:
        self.streams.append(FakeStream(self.body, relay, on_close, on_end))
        return self.streams[-1]


Outcome = Answer | BaseException | Callable[[UpstreamCall, Clock], Answer]


class FakeTransport:
    """Answers each account's calls in turn from its script; records every call."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls: list[UpstreamCall] = []
        self.script: dict[str, list[Outcome]] = {}

    def on(self, account: str, *outcomes: Outcome) -> None:
        self.script.setdefault(account, []).extend(outcomes)

    def send(self, call: UpstreamCall) -> Answer:
        self.calls.append(call)
        outcome = self.script[call.account.id].pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome if isinstance(outcome, Answer) else outcome(call, self.clock)

    @property
    def accounts(self) -> list[str]:
        return [c.account.id for c in self.calls]


def answer(status: int = 200, doc: Any = None, **headers: str) -> Answer:
    return Answer(status, json.dumps(doc).encode(), {"Content-Type": "application/json", **headers})


def sse(*chunks: Any) -> Answer:
    body = b"".join(b"data: " + (c if isinstance(c, bytes) else json.dumps(c).encode()) + b"\n\n" for c in chunks)
    return Answer(200, body, {"Content-Type": "text/event-stream"})


def refused(call: UpstreamCall, clock: Clock) -> Answer:
    raise UpstreamNetworkError(ErrorInfo("upstream_error", f"upstream {call.upstream.name!r} refused the "
                                                           "connection", 502), "refused")


def no_headers_in_time(call: UpstreamCall, clock: Clock) -> Answer:
    """The upstream takes the request and sends nothing until the attempt's header wait ends."""
    assert call.header_wait is not None
    clock.now += call.header_wait
    raise UpstreamNetworkError(ErrorInfo("timeout", f"upstream {call.upstream.name!r} sent no response within "
                                                    f"{call.header_wait:g}s", 504), "header_timeout")


def silent_past_the_deadline(call: UpstreamCall, clock: Clock) -> Answer:
    """The upstream is still silent when the client's first-byte deadline cuts the wait."""
    assert call.first_byte is not None and call.first_byte.deadline is not None
    clock.now = call.first_byte.deadline
    raise OutOfTime


def late(seconds: float, then: Answer) -> Callable[[UpstreamCall, Clock], Answer]:
    def wait(call: UpstreamCall, clock: Clock) -> Answer:
        clock.now += seconds
        return then
    return wait


CHAT_ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
MESSAGES_ANSWER = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                   "content": [{"type": "text", "text": "hi from b"}], "stop_reason": "end_turn",
                   "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 2}}
CHAT_STREAM = (
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
     "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}},
    b"[DONE]",
)
RELAYS: list[Relay] = []


def upstream(name: str, protocol: str = "chat_completions", accounts: int = 3, **extra: Any) -> dict[str, Any]:
    return {"name": name, "protocol": protocol, "base_url": f"http://{name}.invalid/v1",
            "accounts": [{"id": f"{name}{i}", "api_key": f"sk-{name}{i}-secret-0123456789"}
                         for i in range(1, accounts + 1)],
            **extra, "pool": {"policy": "round_robin", **extra.get("pool", {})}}


def relay_for(*upstreams: dict[str, Any], **top: Any) -> tuple[Relay, FakeTransport, Clock]:
    config = registry.resolve(parse({"client_keys": ["sk-client"], "upstreams": list(upstreams), **top}))
    clock = Clock()
    pools = {u.name: AccountPool(u, clock=clock) for u in config.upstreams}
    transport = FakeTransport(clock)
    secrets = tuple(a.api_key for u in config.upstreams for a in u.accounts)
    relay = Relay(config, Router(config.upstreams), pools, transport, secrets, clock=clock)
    RELAYS.append(relay)
    return relay, transport, clock


@pytest.fixture(autouse=True)
def _no_lease_left_held() -> Iterator[None]:
    """Whatever the path a test took, every lease was released: no account counts a request in flight."""
    RELAYS.clear()
    yield
    held = {s.id: s.in_flight for r in RELAYS for p in r.pools.values() for s in p.states() if s.in_flight}
    assert held == {}


def request(protocol: str = "chat_completions", stream: bool = False, model: str = "m") -> Exchange:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "Hello"}]}
    if protocol == "messages":
        body["max_tokens"] = 100
    if stream:
        body["stream"] = True
    side = registry.get(protocol).client
    side.validate(body)
    model, stream = side.model_and_stream(body)
    return Exchange(protocol=protocol, body=body, model=model, stream=stream, request_id="req_test")


def state(relay: Relay, account: str) -> AccountState:
    found = relay.pools[account.rstrip("0123456789")].get(account)
    assert found is not None
    return found


def refusal(relay: Relay, ex: Exchange) -> ProxyError:
    with pytest.raises(ProxyError) as caught:
        relay.handle(ex)
    return caught.value


def content(result: RelayResult) -> Any:
    assert isinstance(result.body, bytes)
    return json.loads(result.body)["choices"][0]["message"]["content"]


# ---------------------------------------------------------------- failover per the pool's classification


def test_the_first_account_answers_and_its_usage_is_counted() -> None:
    relay, transport, _ = relay_for(upstream("a"))
    transport.on("a1", answer(200, CHAT_ANSWER))
    result = relay.handle(request())
    assert (result.status, content(result)) == (200, "hi")
    assert transport.accounts == ["a1"]
    assert (state(relay, "a1").tokens_in, state(relay, "a1").tokens_out) == (3, 1)
    call = transport.calls[0]
    assert (call.path, call.method, call.stream) == ("/chat/completions", "POST", True)
    assert json.loads(call.body or b"")["messages"] == [{"role": "user", "content": "Hello"}]


@pytest.mark.parametrize(("status", "body", "headers", "after", "klass"), [
    (429, {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}}, {"Retry-After": "20"},
     COOLING, "exhausted"),
    (402, {"error": {"message": "Payment required", "type": "insufficient_quota"}}, {}, COOLING, "exhausted"),
    (401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}, {},
     DISABLED, "auth_invalid"),
    (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, {}, ACTIVE, "overloaded"),
    (403, {"error": {"message": "Insufficient tokens in your account"}}, {}, ACTIVE, "insufficient_tokens"),
])
def test_a_failure_another_account_may_survive_goes_to_the_next_account(
        status: int, body: Any, headers: dict[str, str], after: str, klass: str) -> None:
    relay, transport, clock = relay_for(upstream("a"))
    transport.on("a1", answer(status, body, **headers))
    transport.on("a2", answer(200, CHAT_ANSWER))
    assert content(relay.handle(request())) == "hi"
    assert transport.accounts == ["a1", "a2"]
    assert (state(relay, "a1").status, state(relay, "a1").failures) == (after, {klass: 1})
    if status == 429:
        assert state(relay, "a1").until == clock.now + 20  # when the upstream said the limit resets
    if status == 402:
        assert state(relay, "a1").until == clock.now + 60  # the pool's default cooldown
    assert state(relay, "a2").failures == {}


@pytest.mark.parametrize("fails", [refused, no_headers_in_time], ids=["refused", "no headers in time"])
def test_a_network_failure_goes_to_the_next_account_and_leaves_the_account_in_rotation(
        fails: Callable[[UpstreamCall, Clock], Answer]) -> None:
    relay, transport, _ = relay_for(upstream("a"))
    transport.on("a1", fails)
    transport.on("a2", answer(200, CHAT_ANSWER))
    assert content(relay.handle(request())) == "hi"
    assert transport.accounts == ["a1", "a2"]
    assert (state(relay, "a1").status, state(relay, "a1").failures) == (ACTIVE, {"network": 1})


def test_an_account_whose_proxies_all_failed_is_not_blamed() -> None:
    relay, transport, _ = relay_for(upstream("a"))
    exhausted = ProxiesExhausted("a", state(relay, "a1").account, None)
    transport.on("a1", exhausted)
    transport.on("a2", answer(200, CHAT_ANSWER))
    assert content(relay.handle(request())) == "hi"
    assert (state(relay, "a1").status, state(relay, "a1").failures) == (ACTIVE, {})


@pytest.mark.parametrize("status", [500, 502, 503, 400])
def test_a_failure_every_account_would_share_is_the_clients_answer_at_once(status: int) -> None:
    relay, transport, _ = relay_for(upstream("a"))
    body = {"error": {"message": "something broke", "type": "server_error", "code": "internal"}}
    transport.on("a1", answer(status, body))
    err = refusal(relay, request())
    assert (err.info.status, err.info.message) == (status, "something broke")
    assert transport.accounts == ["a1"]
    assert (state(relay, "a1").status, state(relay, "a1").failures) == (ACTIVE, {"other": 1})


def test_a_rule_in_the_config_makes_a_503_go_to_the_next_account() -> None:
    rules = [{"status": 503, "match": "maintenance", "class": "maintenance", "action": "next"}]
    relay, transport, _ = relay_for(upstream("a", pool={"rules": rules}))
    transport.on("a1", answer(503, {"error": {"message": "Down for maintenance"}}))
    transport.on("a2", answer(200, CHAT_ANSWER))
    assert content(relay.handle(request())) == "hi"
    assert state(relay, "a1").failures == {"maintenance": 1}


def test_when_every_account_failed_without_leaving_rotation_the_client_gets_the_upstreams_error() -> None:
    relay, transport, _ = relay_for(upstream("a"))
    for account in ("a1", "a2", "a3"):
        transport.on(account, answer(529, {"type": "error", "error": {"type": "overloaded_error",
                                                                      "message": f"Overloaded ({account})"}}))
    err = refusal(relay, request())
    assert (err.info.status, err.info.kind, err.info.message) == (529, "overloaded", "Overloaded (a3)")
    assert transport.accounts == ["a1", "a2", "a3"]


def test_when_no_account_can_be_reached_the_client_is_told_the_network_failure() -> None:
    relay, transport, _ = relay_for(upstream("a", accounts=2))
    transport.on("a1", refused)
    transport.on("a2", refused)
    err = refusal(relay, request())
    assert (err.info.status, err.info.message) == (502, "upstream 'a' refused the connection")


# ---------------------------------------------------------------- how many attempts, and where


def test_max_attempts_bounds_the_accounts_tried_on_one_upstream() -> None:
    relay, transport, _ = relay_for(upstream("a", pool={"max_attempts": 2}))
    for account in ("a1", "a2", "a3"):
        transport.on(account, answer(429, {"error": {"message": "slow down"}}, **{"Retry-After": "20"}))
    err = refusal(relay, request())
    assert transport.accounts == ["a1", "a2"]
    assert err.info.status == 503 and err.info.code == "no_active_account"
    assert err.info.message == (
        "No active account is available for model 'm': upstream 'a' has 3 account(s): 2 cooling, 0 disabled, "
        "0 at max_concurrency (2 exhausted: HTTP 429: slow down). The next cooling account returns in 20s. "
        "The last attempt failed with HTTP 429: slow down")
    assert err.headers == {"Retry-After": "20"}
    assert state(relay, "a3").requests == 0


def test_routes_are_tried_in_config_order_across_upstreams_of_other_protocols() -> None:
    relay, transport, _ = relay_for(
        upstream("x", models={"serve": ["other-*"]}),  # first in the config, but does not serve "m"
        upstream("a", accounts=2),
        upstream("b", protocol="messages", accounts=1, models={"aliases": {"m": "claude-x"}}),
    )
    transport.on("a1", answer(429, {"error": {"message": "slow down"}}))
    transport.on("a2", answer(401, {"error": {"message": "bad key"}}))
    transport.on("b1", answer(200, MESSAGES_ANSWER))
    result = relay.handle(request())
    assert transport.accounts == ["a1", "a2", "b1"]
    assert content(result) == "hi from b"  # a Messages answer, translated for the Chat client
    sent = transport.calls[2]
    assert sent.path == "/messages"
    body = json.loads(sent.body or b"")
    assert (body["model"], body["messages"], body["max_tokens"] > 0) == (
        "claude-x", [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}], True)
    assert sent.headers is None  # a Chat client's headers do not travel to a Messages upstream
    assert (state(relay, "b1").tokens_in, state(relay, "b1").tokens_out) == (5, 2)


def test_a_model_no_upstream_serves_is_a_404_that_says_where_to_look() -> None:
    relay, transport, _ = relay_for(upstream("a", models={"serve": ["gpt-*"]}))
    err = refusal(relay, request(model="claude-x"))
    assert (err.info.status, err.info.code, err.info.param) == (404, "model_not_found", "model")
    assert "GET /v1/models" in err.info.message
    assert transport.calls == []


def test_the_429_says_when_the_next_account_returns_and_retry_after_counts_down() -> None:
    relay, transport, clock = relay_for(upstream("a", accounts=1))
    transport.on("a1", answer(429, {"error": {"message": "slow down"}}, **{"Retry-After": "30"}))
    first = refusal(relay, request())
    assert (first.info.status, first.info.kind, first.info.code) == (429, "rate_limit", "all_accounts_rate_limited")
    assert first.info.message.endswith("The next cooling account returns in 30s. "
                                       "The last attempt failed with HTTP 429: slow down")
    assert first.headers == {"Retry-After": "30"}

    clock.now += 12
    second = refusal(relay, request())
    assert transport.accounts == ["a1"]  # nothing to try: the only account is cooling
    assert second.info.status == 429 and second.info.message == (
        "Every account that could serve model 'm' is rate-limited or busy: upstream 'a' has 1 account(s): "
        "1 cooling, 0 disabled, "
        "0 at max_concurrency (1 exhausted: HTTP 429: slow down). The next cooling account returns in 18s.")
    assert second.headers == {"Retry-After": "18"}


def test_cooling_beside_disabled_is_a_429_and_only_disabled_or_broken_is_a_503() -> None:
    relay, transport, _ = relay_for(upstream("a", accounts=2), upstream("b", accounts=1))
    transport.on("a1", answer(401, {"error": {"message": "revoked"}}))
    transport.on("a2", answer(429, {"error": {"message": "slow down"}}, **{"Retry-After": "40"}))
    transport.on("b1", answer(429, {"error": {"message": "slow down"}}, **{"Retry-After": "25"}))
    err = refusal(relay, request())
    assert transport.accounts == ["a1", "a2", "b1"]
    assert (err.info.status, err.info.kind) == (429, "rate_limit")  # the accounts that could serve are cooling
    assert err.headers == {"Retry-After": "25"}  # the soonest return, across upstreams
    relay.pools["b"].disable("b1", "admin: off")
    relay.pools["a"].disable("a2", "admin: off")
    only_disabled = refusal(relay, request())
    assert (only_disabled.info.status, only_disabled.info.code) == (503, "no_active_account")
    assert only_disabled.headers == {}


# ---------------------------------------------------------------- the first byte's deadline


def test_a_stream_whose_first_byte_does_not_come_in_time_gets_a_504_saying_what_was_tried() -> None:
    relay, transport, _ = relay_for(upstream("a"), timeouts={"first_byte_total": 45})
    transport.on("a1", answer(429, {"error": {"message": "slow down"}}))
    transport.on("a2", no_headers_in_time)  # 30s: a stream's default wait for headers
    transport.on("a3", silent_past_the_deadline)  # cut at 45s, 15s into its wait
    err = refusal(relay, request(stream=True))
    assert transport.accounts == ["a1", "a2", "a3"]
    assert (err.info.status, err.info.kind) == (504, "timeout")
    assert err.info.message == ("upstream 'a': 3 accounts tried (HTTP 429, 30s, 15s); "
                                "no response headers within 45s in total")
    # Timeouts are counted against an account but do not take it out of rotation.
    assert [state(relay, a).status for a in ("a1", "a2", "a3")] == [COOLING, ACTIVE, ACTIVE]
    assert state(relay, "a3").failures == {"network": 1}


def test_no_attempt_starts_once_the_deadline_has_passed() -> None:
    relay, transport, _ = relay_for(upstream("a"), timeouts={"first_byte_total": 60})
    transport.on("a1", silent_past_the_deadline)
    err = refusal(relay, request(stream=True))
    assert transport.accounts == ["a1"]
    assert err.info.message == "upstream 'a': 1 account tried, 60s; no response headers within 60s in total"
    assert err.info.status == 504


def test_every_account_timing_out_before_the_deadline_is_a_504_too() -> None:
    relay, transport, _ = relay_for(upstream("a", timeouts={"first_byte": 10}), timeouts={"first_byte_total": 600})
    for account in ("a1", "a2", "a3"):
        transport.on(account, no_headers_in_time)
    err = refusal(relay, request(stream=True))
    assert (err.info.status, err.info.message) == (
        504, "upstream 'a': 3 accounts tried, 10s each; none sent response headers in time")


def test_a_non_streamed_request_has_no_first_byte_deadline() -> None:
    relay, transport, _ = relay_for(upstream("a"), timeouts={"first_byte_total": 5})
    transport.on("a1", late(200, answer(200, CHAT_ANSWER)))  # a long generation, answered whole
    assert content(relay.handle(request())) == "hi"
    call = transport.calls[0]
    assert call.first_byte is not None and call.first_byte.deadline is None
    assert call.header_wait == 300  # the upstream's `read`: the headers come with the whole answer


# ---------------------------------------------------------------- errors in the client's envelope


def test_a_same_protocol_error_reaches_the_client_as_the_upstream_worded_it_without_secrets() -> None:
    relay, transport, _ = relay_for(upstream("a"))
    body = {"error": {"message": "Invalid 'temperature' for key sk-a1-secret-0123456789", "type": "invalid_request_error",
                      "param": "temperature", "code": "invalid_value"}, "request_id": "up-1"}
    transport.on("a1", answer(400, body))
    err = refusal(relay, request())
    assert err.info.status == 400
    assert err.raw_body is not None and b"sk-a1" not in err.raw_body
    assert json.loads(err.raw_body) == {
        "error": {"message": "Invalid 'temperature' for key [redacted]", "type": "invalid_request_error",
                  "param": "temperature", "code": "invalid_value"}, "request_id": "up-1"}


def test_a_messages_upstreams_error_keeps_its_envelope_for_a_messages_client() -> None:
    relay, transport, _ = relay_for(upstream("b", protocol="messages", accounts=1))
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"},
            "request_id": "req_up"}
    transport.on("b1", answer(400, body))
    err = refusal(relay, request("messages"))
    assert err.raw_body is not None and json.loads(err.raw_body) == body


def test_an_error_from_an_upstream_of_another_protocol_is_re_expressed_in_the_clients_envelope() -> None:
    relay, transport, _ = relay_for(upstream("b", protocol="messages", accounts=1))
    transport.on("b1", answer(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                "message": "max_tokens: too large"}}))
    err = refusal(relay, request())
    assert err.raw_body is None  # the edge renders it in the Chat client's envelope
    assert registry.get("chat_completions").client.error_body(err.info) == {
        "error": {"message": "max_tokens: too large", "type": "invalid_request_error", "param": None, "code": None}}


def test_a_200_whose_body_is_an_error_is_judged_as_that_error() -> None:
    relay, transport, _ = relay_for(upstream("a"))
    transport.on("a1", answer(200, {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}}))
    transport.on("a2", answer(200, {"error": {"message": "Unknown parameter 'foo'", "type": "invalid_request_error"}}))
    err = refusal(relay, request())
    assert transport.accounts == ["a1", "a2"]
    assert (state(relay, "a1").status, state(relay, "a1").failures) == (COOLING, {"exhausted": 1})
    assert (err.info.status, err.info.message) == (400, "Unknown parameter 'foo'")  # a fail: no third account
    assert err.raw_body is None


# ---------------------------------------------------------------- streams, and every other way out


def test_a_stream_holds_its_lease_until_it_closes_and_counts_its_usage() -> None:
    relay, transport, _ = relay_for(upstream("a"))
    transport.on("a1", sse(*CHAT_STREAM))
    result = relay.handle(request(stream=True))
    assert result.status == 200 and result.headers["Content-Type"].startswith("text/event-stream")
    assert state(relay, "a1").in_flight == 1  # the client is still reading
    assert not isinstance(result.body, bytes)
    frames = b"".join(result.body)
    assert b'"content":"hi"' in frames and frames.endswith(b"data: [DONE]\n\n")
    result.body.close()
    assert (state(relay, "a1").in_flight, state(relay, "a1").tokens_in, state(relay, "a1").failures) == (0, 3, {})


def test_a_stream_that_fails_on_its_first_event_goes_to_the_next_account() -> None:
    relay, transport, _ = relay_for(upstream("a"))
    failing = sse({"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded", "code": 429}})
    transport.on("a1", failing)
    transport.on("a2", sse(*CHAT_STREAM))
    result = relay.handle(request(stream=True))
    assert transport.accounts == ["a1", "a2"]
    assert failing.streams[0].closed  # the failed upstream's stream was closed, not left open
    assert state(relay, "a1").status == COOLING
    assert not isinstance(result.body, bytes)
    result.body.close()


def test_a_stream_answered_with_one_body_reaches_the_client_as_a_stream() -> None:
    relay, transport, _ = relay_for(upstream("b", protocol="messages", accounts=1))
    transport.on("b1", answer(200, MESSAGES_ANSWER))
    result = relay.handle(request(stream=True))
    assert isinstance(result.body, bytes) and result.headers["Content-Type"].startswith("text/event-stream")
    assert b"hi from b" in result.body and result.body.endswith(b"data: [DONE]\n\n")


def test_a_client_that_hangs_up_while_waiting_ends_the_loop() -> None:
    relay, transport, _ = relay_for(upstream("a"))
    transport.on("a1", ClientGone())
    err = refusal(relay, request())
    assert err.info.status == 499 and transport.accounts == ["a1"]
    assert state(relay, "a1").failures == {"client_gone": 1}


def test_a_bug_below_the_loop_propagates_and_frees_the_account() -> None:
    relay, transport, _ = relay_for(upstream("a"))
    transport.on("a1", RuntimeError("bug"))
    with pytest.raises(RuntimeError):
        relay.handle(request())
    assert (state(relay, "a1").status, state(relay, "a1").failures) == (ACTIVE, {})


@pytest.mark.parametrize(("body", "message"), [
    (b"x" * 2049, "upstream 'a' answered with more than 2048 bytes, the limit for a non-streamed answer "
                  "(max_response_bytes)"),
    (b"<html>oops</html>", "upstream 'a' returned a body that is not a JSON object"),
])
def test_an_answer_that_cannot_be_used_is_a_502(body: bytes, message: str) -> None:
    relay, transport, _ = relay_for(upstream("a"), max_response_bytes=2048)
    transport.on("a1", Answer(200, body))
    err = refusal(relay, request())
    assert (err.info.status, err.info.message) == (502, message)
    assert state(relay, "a1").failures == {"upstream_error": 1}
