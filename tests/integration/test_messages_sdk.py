"""The real anthropic SDK against a live gunicorn + gevent proxy whose upstream speaks Chat
Completions (the simulated upstream). Each test checks what the client sees and what reached the
upstream."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer
from tests.wire import request

WEATHER = [{"name": "get_weather", "description": "Current weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
# A 2x1 PNG, so the image is real bytes.
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000002000000010806000000f478d4fa0000000d49444154789c63f8cfc0f01f0005"
    "0001ffa65f9a1b0000000049454e44ae426082")).decode()


def client(proxy: ProxyServer, **kwargs: Any) -> Anthropic:
    return Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0, timeout=20, **kwargs)


def rid() -> str:
    return "msg-test-" + uuid.uuid4().hex


def upstream_body(demo: DemoUpstream, request_id: str) -> dict[str, Any]:
    (seen,) = demo.requests(request_id)
    return seen["body"]


def test_non_stream_message(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    message = client(proxy).messages.create(
        model="claude-sonnet-4-6", max_tokens=300, system="Be brief.",
        messages=[{"role": "user", "content": "Hello [demo:pace=0]"}], extra_headers={"X-Request-Id": request_id})
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == "claude-sonnet-4-6"
    assert message.content[0].type == "text" and message.content[0].text.startswith("Hello from the llm-proxy")
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    assert message.usage.cache_read_input_tokens == 0 and message.usage.cache_creation_input_tokens == 0
    body = upstream_body(demo_upstream, request_id)
    assert body["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Hello [demo:pace=0]"}]
    assert body["max_tokens"] == 300 and body["model"] == "claude-sonnet-4-6" and "stream" not in body


def test_stream_helper_final_message_and_text_stream(proxy: ProxyServer) -> None:
    with client(proxy).messages.stream(model="claude-sonnet-4-6", max_tokens=300,
                                       messages=[{"role": "user", "content": "Hi [demo:pace=0]"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("Hello from the llm-proxy demo upstream.")
    assert final.content[0].text == text and final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 1 and final.usage.input_tokens > 0


def test_create_stream_events(proxy: ProxyServer) -> None:
    events = list(client(proxy).messages.create(
        model="claude-x", max_tokens=100, stream=True, messages=[{"role": "user", "content": "Hi [demo:pace=0]"}]))
    types = [e.type for e in events]
    assert types[0] == "message_start" and types[1] == "content_block_start"
    assert types[-2:] == ["message_delta", "message_stop"]
    assert events[-2].usage.output_tokens > 0 and events[-2].usage.input_tokens > 0


def test_tool_round_trip(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    ant = client(proxy)
    first = ant.messages.create(model="claude-x", max_tokens=300, tools=WEATHER,
                                messages=[{"role": "user", "content": "Use get_weather for Paris [demo:pace=0]"}])
    assert first.stop_reason == "tool_use"
    (call,) = [b for b in first.content if b.type == "tool_use"]
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"})
    request_id = rid()
    with ant.messages.stream(
            model="claude-x", max_tokens=300, tools=WEATHER, extra_headers={"X-Request-Id": request_id},
            messages=[{"role": "user", "content": "Use get_weather for Paris [demo:pace=0]"},
                      {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                    "content": "sunny, 21C"}]}]) as stream:
        final = stream.get_final_message()
    assert "sunny, 21C" in final.content[0].text and final.stop_reason == "end_turn"
    messages = upstream_body(demo_upstream, request_id)["messages"]
    assert messages[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
    assert messages[2] == {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"}


@pytest.mark.parametrize("directive", ["parallel", "interleave"])
def test_parallel_tool_calls_each_whole_in_its_own_block(proxy: ProxyServer, directive: str) -> None:
    with client(proxy).messages.stream(
            model="claude-x", max_tokens=300, tools=WEATHER,
            messages=[{"role": "user", "content": f"Paris and Tokyo [demo:{directive}] [demo:pace=0]"}]) as stream:
        final = stream.get_final_message()
    calls = [(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert calls == [("call_demo0", "get_weather", {"city": "Paris"}), ("call_demo1", "get_weather", {"city": "Tokyo"})]
    assert final.stop_reason == "tool_use"


def test_thinking_is_signed_and_its_replay_follows_the_upstream_config(
        proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    ant = client(proxy)
    with ant.messages.stream(model="claude-x", max_tokens=300, thinking={"type": "enabled", "budget_tokens": 2000},
                             messages=[{"role": "user", "content": "Think [demo:reasoning] [demo:pace=0]"}]) as stream:
        final = stream.get_final_message()
    thinking, text = final.content
    assert thinking.type == "thinking" and thinking.thinking.startswith("The user wants an answer.")
    assert thinking.signature  # every thinking block is signed, as clients require
    assert text.type == "text"
    history = [{"role": "user", "content": "Think [demo:pace=0]"},
               {"role": "assistant", "content": [b.model_dump() for b in final.content]},
               {"role": "user", "content": "And now? [demo:pace=0]"}]
    plain, deepseek = rid(), rid()
    ant.messages.create(model="claude-x", max_tokens=300, thinking={"type": "enabled", "budget_tokens": 2000},
                        messages=history, extra_headers={"X-Request-Id": plain})
    ant.messages.create(model="deepseek-chat", max_tokens=32000, thinking={"type": "enabled", "budget_tokens": 2000},
                        messages=history, extra_headers={"X-Request-Id": deepseek})
    sent_plain = upstream_body(demo_upstream, plain)
    assert "reasoning_content" not in sent_plain["messages"][1] and "thinking" not in sent_plain
    assert "reasoning_effort" not in sent_plain  # reasoning control is off unless configured
    sent_deepseek = upstream_body(demo_upstream, deepseek)
    assert sent_deepseek["messages"][1]["reasoning_content"] == thinking.thinking
    assert sent_deepseek["thinking"] == {"type": "enabled"}
    assert sent_deepseek["max_tokens"] == 8192  # capped at the upstream's max_output_tokens


def test_images_base64_and_url(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    client(proxy).messages.create(model="claude-x", max_tokens=100, extra_headers={"X-Request-Id": request_id},
                                  messages=[{"role": "user", "content": [
                                      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                                      {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                                      {"type": "text", "text": "What are these? [demo:pace=0]"}]}])
    content = upstream_body(demo_upstream, request_id)["messages"][0]["content"]
    assert content == [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                       {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                       {"type": "text", "text": "What are these? [demo:pace=0]"}]


def test_both_auth_styles_and_beta_query(proxy: ProxyServer) -> None:
    body = {"model": "claude-x", "max_tokens": 50, "messages": [{"role": "user", "content": "hi [demo:pace=0]"}]}
    for headers in ({"x-api-key": CLIENT_KEY}, {"Authorization": f"Bearer {CLIENT_KEY}"}):
        resp = request(proxy.url, "POST", "/v1/messages?beta=true", body,
                       {**headers, "anthropic-version": "2023-06-01", "anthropic-beta": "made-up-beta-2099-01-01"})
        assert resp.status == 200 and resp.json()["type"] == "message"
        resp.close()
    resp = request(proxy.url, "POST", "/v1/messages/count_tokens?beta=true", {"model": "m", "messages": body["messages"]},
                   {"x-api-key": CLIENT_KEY, "anthropic-version": "2026-10-21"})
    assert resp.status == 200 and resp.json()["input_tokens"] > 0
    resp.close()


def test_count_tokens_grows_with_what_is_sent(proxy: ProxyServer) -> None:
    ant = client(proxy)
    short = ant.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "hello"}])
    longer = ant.messages.count_tokens(model="claude-x", system="You are helpful. " * 50,
                                       messages=[{"role": "user", "content": "hello " * 200}])
    with_tools = ant.messages.count_tokens(model="claude-x", tools=WEATHER,
                                           messages=[{"role": "user", "content": "hello " * 200}])
    with_image = ant.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "text", "text": "hello"}]}])
    assert 0 < short.input_tokens < 20
    assert 300 < longer.input_tokens < 700  # 1,000 words of English: ~250 tokens of prompt + ~200 of system
    assert with_tools.input_tokens > longer.input_tokens - 200
    assert with_image.input_tokens > short.input_tokens


def test_stop_sequence(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    message = client(proxy).messages.create(
        model="claude-x", max_tokens=100, stop_sequences=["STOP"], extra_headers={"X-Request-Id": request_id},
        messages=[{"role": "user", "content": "Count [demo:stop=STOP] [demo:pace=0]"}])
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "STOP")
    assert upstream_body(demo_upstream, request_id)["stop"] == ["STOP"]


def test_length_is_max_tokens(proxy: ProxyServer) -> None:
    message = client(proxy).messages.create(model="claude-x", max_tokens=5,
                                            messages=[{"role": "user", "content": "Long [demo:length] [demo:pace=0]"}])
    assert message.stop_reason == "max_tokens"


def test_errors_in_the_anthropic_envelope(proxy: ProxyServer) -> None:
    ant = client(proxy)
    with pytest.raises(anthropic.BadRequestError) as bad:
        ant.messages.create(model="claude-x", max_tokens=0, messages=[{"role": "user", "content": "x"}])
    assert bad.value.body == {"type": "error", "error": {"type": "invalid_request_error",
                                                         "message": "max_tokens: must be at least 1"}}
    with pytest.raises(anthropic.AuthenticationError) as auth:
        Anthropic(base_url=proxy.url, api_key="sk-wrong", max_retries=0).messages.create(
            model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert auth.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.PermissionDeniedError) as denied:
        ant.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "[demo:status=403]"}])
    assert denied.value.body["error"] == {"type": "permission_error", "message": "demo upstream failure 403"}  # type: ignore[index]
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        ant.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "[demo:status-all=529]"}])
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    resp = request(proxy.url, "POST", "/v1/messages/batches", {}, {"x-api-key": CLIENT_KEY})
    assert resp.status == 404 and resp.json()["error"]["type"] == "not_found_error"
    resp.close()


def test_error_mid_stream_raises_with_content_before_it(proxy: ProxyServer) -> None:
    received = []
    with pytest.raises(anthropic.APIStatusError) as caught, client(proxy).messages.stream(
            model="claude-x", max_tokens=100,
            messages=[{"role": "user", "content": "[demo:fail-midstream] [demo:pace=0]"}]) as stream:
        for text in stream.text_stream:
            received.append(text)
    assert received and caught.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert "demo upstream failed mid-stream" in json.dumps(caught.value.body)
