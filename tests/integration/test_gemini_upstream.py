"""`protocol: gemini` upstreams, through a live gunicorn + gevent proxy in front of the demo's Gemini
face, which enforces thought signatures as Gemini 3 does (a `gemini-3*` model): every client protocol
(the real openai and anthropic SDKs) gets text and completes a two-step tool chain, streamed and not;
what reached the upstream is a valid Gemini request with each step's signature back on its call — the
real one when the client kept it, the validator-skip value when it could not; the pool reads Google's
errors; count_tokens is the upstream's own count."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.protocols.gemini.vocabulary import SKIP_SIGNATURE
from tests.conftest import DemoUpstream, ProxyServer
from tests.integration.upstreams import (
    WEATHER_PARAMS,
    anthropic_client,
    assert_pool_moves_on,
    openai_client,
    rid,
    upstream_proxy,
    words,
)

KEYS = ("gm-key-one-0001", "gm-key-two-0002")
MODEL = "gemini-3-pro-preview"  # the demo signs and enforces signatures for gemini-3* models
TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}}]


@pytest.fixture(scope="module")
def gm_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    with upstream_proxy(demo_upstream, Path(tmp_path_factory.mktemp("gemini-upstream")), "gemini", "gem", KEYS,
                        base_url=demo_upstream.root) as server:
        yield server


def seen(demo: DemoUpstream, request_id: str) -> dict[str, Any]:
    """The one request the upstream saw, checked for what every Gemini request must be."""
    (record,) = demo.requests(request_id)
    assert record["path"].startswith(f"/v1beta/models/{MODEL}:"), record["path"]
    headers = record["headers"]
    assert headers["x-goog-api-key"] in KEYS and "authorization" not in headers
    body: dict[str, Any] = record["body"]
    assert all(c["role"] in ("user", "model") and c["parts"] for c in body["contents"])
    assert "model" not in body and "llm_proxy_url" not in body
    return body


def first_call(body: dict[str, Any], step: int = 0) -> dict[str, Any]:
    """The first functionCall part of the `step`-th model content that calls functions."""
    steps = [c for c in body["contents"] if c["role"] == "model" and any("functionCall" in p for p in c["parts"])]
    return next(p for p in steps[step]["parts"] if "functionCall" in p)


# ------------------------------------------------------------ Chat Completions clients


@pytest.mark.parametrize("stream", [False, True])
def test_chat_client_text(gm_proxy: ProxyServer, demo_upstream: DemoUpstream, stream: bool) -> None:
    request_id = rid()
    kwargs: dict[str, Any] = dict(model=MODEL, max_tokens=50, stop=["zzz"], temperature=0.3,
                                  extra_headers={"X-Request-Id": request_id},
                                  messages=[{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "hi [demo:words=5] [demo:pace=0]"}])
    oai = openai_client(gm_proxy)
    if stream:
        with oai.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as s:
            completion = s.get_final_completion()
    else:
        completion = oai.chat.completions.create(**kwargs)
    assert completion.choices[0].message.content == words(5) and completion.choices[0].finish_reason == "stop"
    assert completion.model == MODEL and completion.usage is not None and completion.usage.completion_tokens == 5
    body = seen(demo_upstream, request_id)
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi [demo:words=5] [demo:pace=0]"}]}]
    assert body["generationConfig"] == {"maxOutputTokens": 50, "stopSequences": ["zzz"], "temperature": 0.3}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("keeps_field", [True, False])
def test_chat_client_tool_chain_keeps_the_signature(gm_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                    stream: bool, keeps_field: bool) -> None:
    """The call's signature rides on it as extra_content; sent back, the upstream gets it on its call.
    A client that drops the field still completes: the step gets the skip value."""
    oai = openai_client(gm_proxy)
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris? [demo:tool] [demo:pace=0]"}]
    if stream:
        with oai.chat.completions.stream(model=MODEL, messages=messages, tools=TOOLS) as s:
            first = s.get_final_completion()
    else:
        first = oai.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert first.choices[0].finish_reason == "tool_calls"
    message = first.choices[0].message.model_dump(exclude_none=True)
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert call["extra_content"]["google"]["thought_signature"].startswith("llmproxy1.gm.")
    if not keeps_field:
        del call["extra_content"]
    request_id = rid()
    messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21C"}]
    second = oai.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS,
                                         extra_headers={"X-Request-Id": request_id})
    assert "sunny, 21C" in (second.choices[0].message.content or "")
    body = seen(demo_upstream, request_id)
    sent = first_call(body)
    assert sent["functionCall"]["name"] == "get_weather" and sent["functionCall"]["args"] == {"city": "Paris"}
    if keeps_field:
        assert sent["thoughtSignature"] not in (SKIP_SIGNATURE, "") and not sent["thoughtSignature"].startswith("llm")
    else:
        assert sent["thoughtSignature"] == SKIP_SIGNATURE
    result = body["contents"][-1]
    assert result["role"] == "user" and result["parts"][0]["functionResponse"]["name"] == "get_weather"
    assert result["parts"][0]["functionResponse"]["response"] == {"result": "sunny, 21C"}
    assert body["tools"] == [{"functionDeclarations": [{"name": "get_weather", "parametersJsonSchema": WEATHER_PARAMS}]}]


# ------------------------------------------------------------ Anthropic Messages clients


@pytest.mark.parametrize("stream", [False, True])
def test_messages_client_tool_chain_with_thinking(gm_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                  stream: bool) -> None:
    """Claude Code's loop on a Gemini 3 model: the signature travels as a thinking block's signature,
    just before its tool_use, and goes back to the call it came on."""
    ant = anthropic_client(gm_proxy)
    kwargs: dict[str, Any] = dict(model=MODEL, max_tokens=1024, thinking={"type": "enabled", "budget_tokens": 2048},
                                  tools=[{"name": "get_weather", "input_schema": WEATHER_PARAMS}],
                                  messages=[{"role": "user", "content": "Weather in Paris? [demo:tool] [demo:pace=0]"}])
    if stream:
        with ant.messages.stream(**kwargs) as s:
            first = s.get_final_message()
    else:
        first = ant.messages.create(**kwargs)
    assert first.stop_reason == "tool_use"
    blocks = [b.model_dump(exclude_none=True) for b in first.content]
    use = next(b for b in blocks if b["type"] == "tool_use")
    carrier = blocks[blocks.index(use) - 1]
    assert carrier["type"] == "thinking" and carrier["signature"].startswith("llmproxy1.gm.")
    request_id = rid()
    second = ant.messages.create(**{**kwargs, "messages": [
        *kwargs["messages"], {"role": "assistant", "content": blocks},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "sunny, 21C"}]}]},
        extra_headers={"X-Request-Id": request_id})
    assert any("sunny, 21C" in getattr(b, "text", "") for b in second.content)
    body = seen(demo_upstream, request_id)
    assert first_call(body)["thoughtSignature"] not in (SKIP_SIGNATURE, "")
    assert body["generationConfig"]["thinkingConfig"] == {"thinkingLevel": "low", "includeThoughts": True}


def test_messages_client_without_thinking_still_completes(gm_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    ant = anthropic_client(gm_proxy)
    kwargs: dict[str, Any] = dict(model=MODEL, max_tokens=1024, tools=[{"name": "get_weather", "input_schema": WEATHER_PARAMS}],
                                  messages=[{"role": "user", "content": "Weather in Paris? [demo:tool] [demo:pace=0]"}])
    first = ant.messages.create(**kwargs)
    assert [b.type for b in first.content] == ["tool_use"]  # no thinking asked: none shown, signature lost
    use = first.content[0]
    request_id = rid()
    second = ant.messages.create(**{**kwargs, "messages": [
        *kwargs["messages"], {"role": "system", "content": "Answer in one line."},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21C"}]}]},
        extra_headers={"X-Request-Id": request_id})
    assert any("sunny, 21C" in getattr(b, "text", "") for b in second.content)
    body = seen(demo_upstream, request_id)
    assert first_call(body)["thoughtSignature"] == SKIP_SIGNATURE
    # A mid-conversation system message is user content for Gemini, which has no system role there.
    assert body["contents"][0]["role"] == "user" and "systemInstruction" not in body
    assert body["contents"][0]["parts"][-1] == {"text": "System instruction: Answer in one line."}


def test_messages_count_tokens_is_the_upstreams_count(gm_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    counted = anthropic_client(gm_proxy).messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "How many tokens is this prompt?"}],
        extra_headers={"X-Request-Id": request_id})
    (record,) = demo_upstream.requests(request_id)
    assert record["path"] == f"/v1beta/models/{MODEL}:countTokens"
    asked = record["body"]["generateContentRequest"]
    assert asked["model"] == f"models/{MODEL}"
    assert asked["contents"] == [{"role": "user", "parts": [{"text": "How many tokens is this prompt?"}]}]
    assert counted.input_tokens > 0


# ------------------------------------------------------------ Responses clients


@pytest.mark.parametrize("stream", [False, True])
def test_responses_client_tool_chain_keeps_the_signature(gm_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                         stream: bool) -> None:
    """Codex's loop: the signature travels in the reasoning item's encrypted_content."""
    oai = openai_client(gm_proxy)
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": WEATHER_PARAMS}]
    kwargs: dict[str, Any] = dict(model=MODEL, tools=tools, store=False, include=["reasoning.encrypted_content"],
                                  input=[{"role": "user", "content": "Weather in Paris? [demo:tool] [demo:pace=0]"}])
    if stream:
        with oai.responses.stream(**kwargs) as s:
            first = s.get_final_response()
    else:
        first = oai.responses.create(**kwargs)
    items = [i.model_dump(exclude_none=True) for i in first.output]
    call = next(i for i in items if i["type"] == "function_call")
    assert any(i["type"] == "reasoning" and i.get("encrypted_content", "").startswith("llmproxy1.gm.") for i in items)
    request_id = rid()
    second = oai.responses.create(**{**kwargs, "input": [
        *kwargs["input"], *items, {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 21C"}]},
        extra_headers={"X-Request-Id": request_id})
    assert "sunny, 21C" in second.output_text
    assert first_call(seen(demo_upstream, request_id))["thoughtSignature"] not in (SKIP_SIGNATURE, "")


# ------------------------------------------------------------ the pool reads Google's errors


def _chat_send(proxy: ProxyServer) -> Any:
    def send(request_id: str) -> None:
        out = openai_client(proxy).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}],
            extra_headers={"X-Request-Id": request_id})
        assert out.choices[0].message.content == words(2)
    return send


def test_a_spent_daily_quota_cools_the_account(gm_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    error = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota exceeded", "details": [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
         "violations": [{"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}}
    assert_pool_moves_on(gm_proxy, demo_upstream, "gem", KEYS, 429, error, _chat_send(gm_proxy), "cooling")


def test_an_invalid_key_disables_the_account(gm_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    error = {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "API key not valid. Please pass a valid "
                       "API key.", "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                                "reason": "API_KEY_INVALID"}]}}
    assert_pool_moves_on(gm_proxy, demo_upstream, "gem", KEYS, 400, error, _chat_send(gm_proxy), "disabled")
