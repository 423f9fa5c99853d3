"""The real openai SDK against a live gunicorn + gevent proxy in front of the simulated upstream.

Each test asserts what the client sees and what reached the upstream (matched by request id).
"""

from __future__ import annotations

import json
import uuid

import openai
import pytest
from openai import OpenAI

from tests.conftest import CLIENT_KEY, UPSTREAM_KEYS, DemoUpstream, ProxyServer

WEATHER = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]


def client(proxy: ProxyServer) -> OpenAI:
    return OpenAI(base_url=f"{proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)


def rid() -> str:
    return "test-" + uuid.uuid4().hex


def test_non_stream_text_and_what_reached_upstream(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    resp = client(proxy).chat.completions.create(
        model="demo-model", messages=[{"role": "user", "content": "Hello [demo:pace=0]"}],
        extra_headers={"X-Request-Id": request_id},
        extra_body={"an_unknown_field": {"kept": True}}, temperature=0.3,
    )
    assert resp.choices[0].message.content.startswith("Hello from the llm-proxy demo upstream.")
    assert resp.choices[0].finish_reason == "stop"
    assert resp.model == "demo-model"
    assert resp.usage is not None and resp.usage.completion_tokens > 0
    (seen,) = demo_upstream.requests(request_id)
    assert seen["path"] == "/v1/chat/completions"
    assert seen["key"] in UPSTREAM_KEYS
    assert seen["body"]["an_unknown_field"] == {"kept": True}  # unknown fields pass through untouched
    assert seen["body"]["temperature"] == 0.3
    assert "stream_options" not in seen["body"]
    assert CLIENT_KEY not in json.dumps(seen["headers"])  # the client's key never goes upstream


def test_stream_text_word_by_word(proxy: ProxyServer) -> None:
    stream = client(proxy).chat.completions.create(
        model="demo-model", stream=True, messages=[{"role": "user", "content": "Hi [demo:pace=0]"}])
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 20  # one chunk per word, not one blob
    assert "".join(pieces).startswith("Hello from the llm-proxy demo upstream.")
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].delta.role for c in chunks[1:] if c.choices] == [None] * (len(chunks) - 1)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].id.startswith("chatcmpl-")
    assert {c.object for c in chunks} == {"chat.completion.chunk"}


def test_stream_usage_only_when_asked_and_always_requested_upstream(
        proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    without = list(client(proxy).chat.completions.create(
        model="demo-model", stream=True, messages=[{"role": "user", "content": "Hi [demo:pace=0]"}],
        extra_headers={"X-Request-Id": request_id}))
    assert all(c.usage is None for c in without)
    assert all(c.choices for c in without)  # the usage-only chunk is kept from a client that did not ask
    (seen,) = demo_upstream.requests(request_id)
    assert seen["body"]["stream_options"] == {"include_usage": True}  # asked upstream for accounting

    with_usage = list(client(proxy).chat.completions.create(
        model="demo-model", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Hi [demo:pace=0]"}]))
    last = with_usage[-1]
    assert last.choices == [] and last.usage is not None and last.usage.total_tokens > 0
    assert all(c.usage is None for c in with_usage[:-1])


def test_stream_helper_tool_call(proxy: ProxyServer) -> None:
    with client(proxy).chat.completions.stream(
            model="demo-model", tools=WEATHER,
            messages=[{"role": "user", "content": "Use get_weather for Paris [demo:pace=0]"}]) as stream:
        events = [ev.type for ev in stream]
        final = stream.get_final_completion()
    (call,) = final.choices[0].message.tool_calls
    assert (call.id, call.type, call.function.name) == ("call_demo0", "function", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.choices[0].message.role == "assistant"
    assert "tool_calls.function.arguments.done" in events


@pytest.mark.parametrize("directive", ["parallel", "interleave"])
def test_stream_helper_parallel_tool_calls(proxy: ProxyServer, directive: str) -> None:
    with client(proxy).chat.completions.stream(
            model="demo-model", tools=WEATHER,
            messages=[{"role": "user", "content": f"Paris and Tokyo [demo:{directive}] [demo:pace=0]"}]) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert [(c.id, c.function.name) for c in calls] == [("call_demo0", "get_weather"), ("call_demo1", "get_weather")]
    assert [json.loads(c.function.arguments) for c in calls] == [{"city": "Paris"}, {"city": "Tokyo"}]


def test_tool_round_trip_non_stream(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    oai = client(proxy)
    first = oai.chat.completions.create(model="demo-model", tools=WEATHER,
                                        messages=[{"role": "user", "content": "Weather? [demo:tool] [demo:pace=0]"}])
    call = first.choices[0].message.tool_calls[0]
    request_id = rid()
    second = oai.chat.completions.create(
        model="demo-model", tools=WEATHER, extra_headers={"X-Request-Id": request_id},
        messages=[{"role": "user", "content": "Weather? [demo:tool] [demo:pace=0]"},
                  first.choices[0].message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"}])
    assert "sunny, 21C" in second.choices[0].message.content
    (seen,) = demo_upstream.requests(request_id)
    assert seen["body"]["messages"][2] == {"role": "tool", "tool_call_id": "call_demo0", "content": "sunny, 21C"}


def test_quirky_upstream_is_normalised_for_the_sdk_helper(proxy: ProxyServer) -> None:
    with client(proxy).chat.completions.stream(
            model="demo-model", tools=WEATHER, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "[demo:quirky] [demo:parallel] [demo:pace=0]"}]) as stream:
        chunks = [ev.chunk for ev in stream if ev.type == "chunk"]
        final = stream.get_final_completion()
    assert final.model == "demo-model"  # the upstream sent an empty model
    assert final.id.startswith("chatcmpl-")  # the upstream sent stream:chat:<uuid>
    assert final.choices[0].message.role == "assistant"  # not "assistantassistant…"
    assert [c.id for c in final.choices[0].message.tool_calls] == ["call_demo0", "call_demo1"]
    assert [c.function.name for c in final.choices[0].message.tool_calls] == ["get_weather", "get_weather"]
    assert final.usage is not None and final.usage.total_tokens > 0
    assert chunks[-1].choices == []  # usage arrived on the finish chunk upstream; split off here


def test_reasoning_content_passes_through(proxy: ProxyServer) -> None:
    chunks = list(client(proxy).chat.completions.create(
        model="demo-model", stream=True, messages=[{"role": "user", "content": "[demo:reasoning] [demo:pace=0]"}]))
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    assert reasoning.startswith("The user wants an answer.")


def test_model_alias_is_mapped_upstream_and_client_sees_its_name(
        proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    resp = client(proxy).chat.completions.create(
        model="alias-model", messages=[{"role": "user", "content": "Hi [demo:pace=0]"}],
        extra_headers={"X-Request-Id": request_id})
    assert resp.model == "alias-model"
    assert demo_upstream.requests(request_id)[0]["body"]["model"] == "demo-model"


def test_upstream_http_error_is_relayed_with_status(proxy: ProxyServer) -> None:
    # 400 is a request the upstream will never accept: returned at once, not retried (see test_pool).
    with pytest.raises(openai.BadRequestError) as caught:
        client(proxy).chat.completions.create(model="demo-model",
                                              messages=[{"role": "user", "content": "[demo:status=400]"}])
    assert caught.value.status_code == 400
    assert caught.value.message.endswith("demo upstream failure 400")


def test_error_mid_stream_raises_api_error(proxy: ProxyServer) -> None:
    stream = client(proxy).chat.completions.create(
        model="demo-model", stream=True, messages=[{"role": "user", "content": "[demo:fail-midstream] [demo:pace=0]"}])
    received = []
    with pytest.raises(openai.APIError, match="demo upstream failed mid-stream"):
        for chunk in stream:
            received.append(chunk)
    assert received  # content arrived before the error


def test_models_list_and_retrieve(proxy: ProxyServer) -> None:
    oai = client(proxy)
    ids = [m.id for m in oai.models.list()]
    assert ids[0] == "alias-model" and "demo-model" in ids and len(ids) == len(set(ids))
    assert oai.models.retrieve("demo-model").id == "demo-model"
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("no-such-model")


def test_unknown_model_is_404_in_openai_shape(tmp_path, demo_upstream: DemoUpstream) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import base_config, start_proxy, stop_proxy

    config = base_config(demo_upstream.url)
    config["upstreams"][0]["models"] = {"serve": ["demo-*"]}
    server = start_proxy(config, tmp_path)
    try:
        with pytest.raises(openai.NotFoundError) as caught:
            client(server).chat.completions.create(model="gpt-unknown", messages=[{"role": "user", "content": "x"}])
        assert caught.value.code == "model_not_found"
        assert "gpt-unknown" in caught.value.message
    finally:
        stop_proxy(server)


def test_model_list_is_fetched_with_a_pool_account_and_cached(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    first, second = rid(), rid()
    for request_id in (first, second):
        client(proxy).models.list(extra_headers={"X-Request-Id": request_id})
    fetched = demo_upstream.requests(first) + demo_upstream.requests(second)
    # The first call may find the cache already warm from another test; the second never fetches.
    assert demo_upstream.requests(second) == []
    for seen in fetched:
        assert seen["path"] == "/v1/models" and seen["key"] in UPSTREAM_KEYS
