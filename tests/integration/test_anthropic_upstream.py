"""`protocol: messages` upstreams, through a live gunicorn + gevent proxy in front of the demo's
Anthropic face: every client protocol (the real openai and anthropic SDKs) gets text and a tool
round trip, streamed and not; what reached the upstream is a valid Messages request; Messages
clients pass through byte for byte; reasoning signatures survive a Responses client; and the
pool treats Anthropic's errors like any other upstream's."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from proxy.demo.tokens import demo_signature
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer
from tests.integration.upstreams import (
    WEATHER_PARAMS,
    anthropic_client,
    assert_pool_moves_on,
    only_request,
    openai_client,
    rid,
    upstream_proxy,
    words,
)
from tests.wire import request

KEYS = ("sk-ant-one-0001", "sk-ant-two-0002")
MODEL = "claude-test"


@pytest.fixture(scope="module")
def ant_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    with upstream_proxy(demo_upstream, Path(tmp_path_factory.mktemp("anthropic-upstream")), "messages",
                        "claude", KEYS, max_output_tokens=8192) as server:
        yield server


def seen(demo: DemoUpstream, request_id: str) -> dict[str, Any]:
    return only_request(demo, request_id, "/v1/messages")


def assert_anthropic_request(record: dict[str, Any]) -> dict[str, Any]:
    """What every request to an Anthropic upstream must look like."""
    headers = record["headers"]
    assert headers["x-api-key"] in KEYS and "authorization" not in headers
    assert headers["anthropic-version"]
    body: dict[str, Any] = record["body"]
    assert isinstance(body["max_tokens"], int)
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles)), roles
    return body


# ------------------------------------------------------------ Chat Completions clients


@pytest.mark.parametrize("stream", [False, True])
def test_chat_client_text(ant_proxy: ProxyServer, demo_upstream: DemoUpstream, stream: bool) -> None:
    request_id = rid()
    kwargs: dict[str, Any] = dict(model=MODEL, max_tokens=50, stop=["zzz"], extra_headers={"X-Request-Id": request_id},
                                  messages=[{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "hi [demo:words=5] [demo:pace=0]"}])
    oai = openai_client(ant_proxy)
    if stream:
        with oai.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as s:
            completion = s.get_final_completion()
    else:
        completion = oai.chat.completions.create(**kwargs)
    assert completion.choices[0].message.content == words(5) and completion.choices[0].finish_reason == "stop"
    assert completion.model == MODEL and completion.usage is not None and completion.usage.completion_tokens == 5
    body = assert_anthropic_request(seen(demo_upstream, request_id))
    assert body["system"] == [{"type": "text", "text": "Be brief."}]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi [demo:words=5] [demo:pace=0]"}]}]
    assert (body["max_tokens"], body["stop_sequences"], body.get("stream", False)) == (50, ["zzz"], stream)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_client_tool_round_trip(ant_proxy: ProxyServer, demo_upstream: DemoUpstream, stream: bool) -> None:
    oai = openai_client(ant_proxy)
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}}]
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris? [demo:tool] [demo:pace=0]"}]
    if stream:
        with oai.chat.completions.stream(model=MODEL, messages=messages, tools=tools) as s:
            first = s.get_final_completion()
    else:
        first = oai.chat.completions.create(model=MODEL, messages=messages, tools=tools)
    assert first.choices[0].finish_reason == "tool_calls"
    (call,) = first.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    request_id = rid()
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"}]
    second = oai.chat.completions.create(model=MODEL, messages=messages, tools=tools, stream=False,
                                         extra_headers={"X-Request-Id": request_id})
    assert "sunny, 21C" in (second.choices[0].message.content or "")
    body = assert_anthropic_request(seen(demo_upstream, request_id))
    assert body["tools"] == [{"name": "get_weather", "input_schema": WEATHER_PARAMS}]
    _, assistant, results = body["messages"]
    assert assistant["content"] == [{"type": "tool_use", "id": call.id, "name": "get_weather",
                                     "input": {"city": "Paris"}}]
    assert results == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                    "content": [{"type": "text", "text": "sunny, 21C"}]}]}


def test_chat_client_error_mid_stream_ends_in_band(ant_proxy: ProxyServer) -> None:
    stream = openai_client(ant_proxy).chat.completions.create(
        model=MODEL, stream=True, messages=[{"role": "user", "content": "hi [demo:fail-midstream] [demo:pace=0]"}])
    with pytest.raises(openai.APIError, match="demo upstream failed mid-stream"):
        for _ in stream:
            pass


# ------------------------------------------------------------ Responses clients


@pytest.mark.parametrize("stream", [False, True])
def test_responses_client_text(ant_proxy: ProxyServer, demo_upstream: DemoUpstream, stream: bool) -> None:
    request_id = rid()
    oai = openai_client(ant_proxy)
    kwargs: dict[str, Any] = dict(model=MODEL, instructions="Be brief.", input="hi [demo:words=4] [demo:pace=0]",
                                  max_output_tokens=40, extra_headers={"X-Request-Id": request_id})
    if stream:
        with oai.responses.stream(**kwargs) as s:
            final = s.get_final_response()
    else:
        final = oai.responses.create(**kwargs)
    assert final.status == "completed" and final.output_text == words(4)
    body = assert_anthropic_request(seen(demo_upstream, request_id))
    assert body["system"] == [{"type": "text", "text": "Be brief."}] and body["max_tokens"] == 40


@pytest.mark.parametrize("stream", [False, True])
def test_responses_client_reasoning_and_tool_round_trip(ant_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                        stream: bool) -> None:
    """Codex's loop on a Claude model: the thinking block's signature reaches the client inside the
    reasoning item's encrypted_content and goes back to Anthropic intact with the tool result."""
    oai = openai_client(ant_proxy)
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": WEATHER_PARAMS, "strict": False}]
    kwargs: dict[str, Any] = dict(model=MODEL, tools=tools, reasoning={"effort": "low"}, store=False,
                                  include=["reasoning.encrypted_content"],
                                  input="Weather in Paris? [demo:tool] [demo:pace=0]")
    if stream:
        with oai.responses.stream(**kwargs) as s:
            first = s.get_final_response()
    else:
        first = oai.responses.create(**kwargs)
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and call.type == "function_call" and call.status == "completed"
    thinking = reasoning.summary[0].text
    assert thinking.startswith("The user wants an answer.")
    assert reasoning.encrypted_content and reasoning.encrypted_content.startswith("llmproxy1.an.")

    request_id = rid()
    replay = [{"role": "user", "content": "Weather in Paris? [demo:tool] [demo:pace=0]"},
              reasoning.model_dump(exclude_none=True), call.model_dump(exclude_none=True),
              {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21C"}]
    second = oai.responses.create(model=MODEL, tools=tools, reasoning={"effort": "low"}, store=False, input=replay,
                                  extra_headers={"X-Request-Id": request_id})
    assert "sunny, 21C" in second.output_text
    body = assert_anthropic_request(seen(demo_upstream, request_id))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    _, assistant, results = body["messages"]
    assert assistant["content"] == [
        {"type": "thinking", "thinking": thinking, "signature": demo_signature(thinking)},
        {"type": "tool_use", "id": call.call_id, "name": "get_weather", "input": {"city": "Paris"}}]
    assert results["content"][0]["tool_use_id"] == call.call_id


# ------------------------------------------------------------ Messages clients: passthrough


@pytest.mark.parametrize("stream", [False, True])
def test_messages_client_passes_through(ant_proxy: ProxyServer, demo_upstream: DemoUpstream, stream: bool) -> None:
    request_id = rid()
    sent: dict[str, Any] = {
        "max_tokens": 64, "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi [demo:words=3] [demo:pace=0]",
                                                   "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}
    beta_fields = {"context_management": {"edits": []}}  # not typed by the SDK: sent as Claude Code does
    ac = anthropic_client(ant_proxy)
    headers = {"X-Request-Id": request_id, "anthropic-beta": "interleaved-thinking-2025-05-14,made-up-beta"}
    if stream:
        with ac.messages.stream(model=MODEL, extra_headers=headers, extra_body=beta_fields, **sent) as s:
            message = s.get_final_message()
    else:
        message = ac.messages.create(model=MODEL, extra_headers=headers, extra_body=beta_fields, **sent)
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.signature == demo_signature(thinking.thinking)
    assert text.type == "text" and text.text == words(3)
    record = seen(demo_upstream, request_id)
    body = assert_anthropic_request(record)
    assert body == {**sent, **beta_fields, "model": MODEL, **({"stream": True} if stream else {})}  # untouched
    assert record["headers"]["anthropic-beta"] == headers["anthropic-beta"]


def test_messages_passthrough_stream_is_byte_exact(ant_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    """Unknown event types and fields, odd usage figures: every byte arrives as the upstream sent it."""
    request_id = rid()
    events = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_01XyZ", "type": "message", "role": "assistant", "model": "claude-upstream-name", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 7, "cache_read_input_tokens": 3,
            "output_tokens": 1, "service_tier": "standard", "inference_geo": "eu"}, "future_field": {"x": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": "", "citations": None}}),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Héllo \u2028 wörld"}}),
        ("brand_new_event", {"type": "brand_new_event", "payload": [1, 2, 3]}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 4, "output_tokens_details": {"thinking_tokens": 0}}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    raw = "".join(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"
                  for name, data in events)
    demo_upstream.control(f"/_demo/script?request_id={request_id}", body=[{"steps": [{"send": raw}]}])
    resp = request(ant_proxy.url, "POST", "/v1/messages",
                   {"model": MODEL, "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                   {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01", "X-Request-Id": request_id})
    assert resp.status == 200
    assert resp.body() == raw.encode()
    resp.close()


def test_messages_passthrough_upstream_error_event_is_relayed(ant_proxy: ProxyServer) -> None:
    stream = anthropic_client(ant_proxy).messages.stream(
        model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "hi [demo:fail-midstream] [demo:pace=0]"}])
    with pytest.raises(anthropic.APIStatusError, match="demo upstream failed mid-stream"), stream as events:
        for _ in events:
            pass


def test_mid_conversation_system_messages_pass_through(ant_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    """Claude Code sends `role: "system"` messages mid-conversation, with its beta, to models that
    take them: accepted, and passed to an Anthropic upstream as sent, beta included."""
    request_id = rid()
    beta = "claude-code-20250219,mid-conversation-system-2026-04-07"
    sent = {"model": MODEL, "max_tokens": 20, "messages": [
        {"role": "user", "content": "first"}, {"role": "assistant", "content": "answer one"},
        {"role": "system", "content": [{"type": "text", "text": "The user switched to plan mode."}]},
        {"role": "user", "content": "second [demo:words=2] [demo:pace=0]"}]}
    resp = request(ant_proxy.url, "POST", "/v1/messages?beta=true", sent,
                   {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01", "anthropic-beta": beta,
                    "X-Request-Id": request_id})
    assert resp.status == 200, resp.body()
    assert resp.json()["content"] == [{"type": "text", "text": words(2)}]
    resp.close()
    record = seen(demo_upstream, request_id)
    # As sent, plus the automatic prompt caching the proxy asks for when the client set none.
    assert record["body"] == {**sent, "cache_control": {"type": "ephemeral"}}
    assert record["headers"]["anthropic-beta"] == beta


def test_signatures_the_proxy_made_never_reach_anthropic(ant_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    """A Claude Code session that began on a Chat upstream replays thinking blocks signed by the
    proxy; an Anthropic upstream would reject them, so they are left out — real ones are kept."""
    request_id = rid()
    real = {"type": "thinking", "thinking": "real", "signature": demo_signature("real")}
    minted = {"type": "thinking", "thinking": "ours", "signature": "llmproxy1.abcdef"}
    history = [{"role": "user", "content": "first"},
               {"role": "assistant", "content": [minted, {"type": "text", "text": "answer one"}]},
               {"role": "user", "content": "second"},
               {"role": "assistant", "content": [real, {"type": "text", "text": "answer two"}]},
               {"role": "user", "content": "third [demo:words=2] [demo:pace=0]"}]
    anthropic_client(ant_proxy).messages.create(model=MODEL, max_tokens=20, messages=history,  # type: ignore[arg-type]
                                                extra_headers={"X-Request-Id": request_id})
    body = assert_anthropic_request(seen(demo_upstream, request_id))
    assert body["messages"][1]["content"] == [{"type": "text", "text": "answer one"}]
    assert body["messages"][3]["content"] == [real, {"type": "text", "text": "answer two"}]


# ------------------------------------------------------------ the pool on Anthropic errors

ANTHROPIC_ERRORS = {
    # fault on the first key: (status, error type, the account's state afterwards)
    "overloaded_529": (529, "overloaded_error", "active"),
    "rate_limited_429": (429, "rate_limit_error", "cooling"),
    "revoked_401": (401, "authentication_error", "disabled"),
}


@pytest.mark.parametrize("case", list(ANTHROPIC_ERRORS))
@pytest.mark.parametrize("client_protocol", ["chat_completions", "messages"])
def test_anthropic_errors_move_to_the_next_account(ant_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                   case: str, client_protocol: str) -> None:
    status, etype, state_after = ANTHROPIC_ERRORS[case]

    def send(request_id: str) -> None:
        prompt = [{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}]
        if client_protocol == "chat_completions":
            out = openai_client(ant_proxy).chat.completions.create(
                model=MODEL, messages=prompt, extra_headers={"X-Request-Id": request_id})  # type: ignore[arg-type]
            assert out.choices[0].message.content == words(2)
        else:
            msg = anthropic_client(ant_proxy).messages.create(
                model=MODEL, max_tokens=20, messages=prompt, extra_headers={"X-Request-Id": request_id})  # type: ignore[arg-type]
            assert msg.content[0].text == words(2)  # type: ignore[union-attr]

    error = {"type": "error", "error": {"type": etype, "message": f"{etype} from the demo"}}
    assert_pool_moves_on(ant_proxy, demo_upstream, "claude", KEYS, status, error, send, state_after)


def test_an_anthropic_400_is_returned_not_retried(ant_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "messages: bad shape"}}
    demo_upstream.control(f"/_demo/script?request_id={request_id}", body=[
        {"status": 400, "body": json.dumps(error), "headers": {"Content-Type": "application/json"}}])
    with pytest.raises(openai.BadRequestError, match="messages: bad shape"):
        openai_client(ant_proxy).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                         extra_headers={"X-Request-Id": request_id})
    assert len(demo_upstream.requests(request_id)) == 1


def test_chat_client_with_reasoning_keeps_working_through_a_tool_loop(ant_proxy: ProxyServer,
                                                                      demo_upstream: DemoUpstream) -> None:
    """A Chat client cannot keep Anthropic's signed thinking blocks; Anthropic refuses a tool-call
    history without them while thinking is on, so that turn goes without thinking instead of failing."""
    oai = openai_client(ant_proxy)
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}}]
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris? [demo:tool] [demo:pace=0]"}]
    first_id = rid()
    first = oai.chat.completions.create(model=MODEL, messages=messages, tools=tools, reasoning_effort="low",
                                        extra_headers={"X-Request-Id": first_id})
    assert seen(demo_upstream, first_id)["body"]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    (call,) = first.choices[0].message.tool_calls or []
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"}]
    second_id = rid()
    second = oai.chat.completions.create(model=MODEL, messages=messages, tools=tools, reasoning_effort="low",
                                         extra_headers={"X-Request-Id": second_id})
    assert "sunny, 21C" in (second.choices[0].message.content or "")
    assert "thinking" not in assert_anthropic_request(seen(demo_upstream, second_id))


@pytest.mark.parametrize("stream", [False, True])
def test_messages_client_tool_round_trip_through_passthrough(ant_proxy: ProxyServer, stream: bool) -> None:
    ac = anthropic_client(ant_proxy)
    tools: Any = [{"name": "get_weather", "input_schema": WEATHER_PARAMS}]
    prompt = {"role": "user", "content": "Weather in Paris? [demo:tool] [demo:pace=0]"}
    if stream:
        with ac.messages.stream(model=MODEL, max_tokens=200, tools=tools, messages=[prompt]) as s:
            first = s.get_final_message()
    else:
        first = ac.messages.create(model=MODEL, max_tokens=200, tools=tools, messages=[prompt])
    (call,) = first.content
    assert call.type == "tool_use" and call.input == {"city": "Paris"} and first.stop_reason == "tool_use"
    second = ac.messages.create(model=MODEL, max_tokens=200, tools=tools, messages=[
        prompt, {"role": "assistant", "content": [call.model_dump()]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21C"}]}])
    assert "sunny, 21C" in second.content[0].text  # type: ignore[union-attr]
