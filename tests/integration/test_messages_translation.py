"""Every request translation rule of `/v1/messages` → an OpenAI-compatible upstream, asserted on
the body that actually reached the upstream through a live proxy."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer
from tests.wire import request

WEATHER = {"name": "get_weather", "description": "Weather", "cache_control": {"type": "ephemeral"},
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
HEADERS = {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01",
           "anthropic-beta": "context-management-2025-06-27,not-a-real-beta-2099"}


def send(proxy: ProxyServer, demo: DemoUpstream, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    request_id = "rules-" + uuid.uuid4().hex
    resp = request(proxy.url, "POST", "/v1/messages?beta=true", body, {**HEADERS, "X-Request-Id": request_id})
    answer = resp.json()
    resp.close()
    assert resp.status == 200, answer
    (seen,) = demo.requests(request_id)
    return answer, seen["body"]


def test_every_rule_in_one_conversation(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    body = {
        "model": "claude-x", "max_tokens": 1000, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
        "stop_sequences": ["END", "STOP"], "metadata": {"user_id": "user_abc"},
        "system": [{"type": "text", "text": "Sys one.", "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": "Sys two."}],
        "thinking": {"type": "enabled", "budget_tokens": 4000},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [
            {"role": "user", "content": "First question"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "EqQBreal"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Tokyo"}},
                {"type": "tool_use", "id": "toolu_3", "name": "get_weather", "input": {"city": "Rome"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": [
                    {"type": "text", "text": "rainy"},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/radar.png"}}]},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": False},
                {"type": "text", "text": "Thanks. [demo:pace=0]", "cache_control": {"type": "ephemeral"}}]},
        ],
    }
    answer, sent = send(proxy, demo_upstream, body)
    assert answer["type"] == "message"
    assert sent["messages"] == [
        {"role": "system", "content": "Sys one.\nSys two."},
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [  # thinking dropped for this upstream
            {"id": f"toolu_{i}", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": c})}}
            for i, c in ((1, "Paris"), (2, "Tokyo"), (3, "Rome"))]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},  # results in the order of the calls
        {"role": "tool", "tool_call_id": "toolu_2", "content": "rainy"},
        {"role": "tool", "tool_call_id": "toolu_3",  # the client lost this one: a synthetic result
         "content": "[Tool result unavailable - conversation history was truncated]"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/radar.png"}}]},
        {"role": "user", "content": "Thanks. [demo:pace=0]"},
    ]
    assert sent["tools"] == [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                                                "parameters": WEATHER["input_schema"]}}]
    assert sent["tool_choice"] == "required" and sent["parallel_tool_calls"] is False
    assert (sent["max_tokens"], sent["temperature"], sent["top_p"]) == (1000, 0.5, 0.9)
    assert sent["stop"] == ["END", "STOP"] and sent["user"] == "user_abc"
    for absent in ("thinking", "reasoning_effort", "context_management", "top_k", "metadata", "system",
                   "stop_sequences", "stream"):
        assert absent not in sent
    assert "cache_control" not in json.dumps(sent) and "EqQBreal" not in json.dumps(sent)


@pytest.mark.parametrize(("choice", "expected", "parallel"), [
    ({"type": "auto"}, "auto", None),
    ({"type": "any"}, "required", None),
    ({"type": "tool", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}, None),
    ({"type": "none"}, "none", None),
    ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
])
def test_tool_choice(proxy: ProxyServer, demo_upstream: DemoUpstream, choice: dict[str, Any], expected: Any,
                     parallel: bool | None) -> None:
    _, sent = send(proxy, demo_upstream, {"model": "claude-x", "max_tokens": 50, "tools": [WEATHER], "tool_choice": choice,
                                          "messages": [{"role": "user", "content": "Hi [demo:pace=0]"}]})
    assert sent["tool_choice"] == expected
    assert sent.get("parallel_tool_calls") is parallel


def test_reasoning_control_where_configured(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    # The `deepseek-*` upstream is configured with reasoning.control: deepseek and passback.
    _, enabled = send(proxy, demo_upstream, {"model": "deepseek-chat", "max_tokens": 50, "thinking": {"type": "adaptive"},
                                             "messages": [{"role": "user", "content": "Hi [demo:pace=0]"}]})
    _, disabled = send(proxy, demo_upstream, {"model": "deepseek-chat", "max_tokens": 50, "thinking": {"type": "disabled"},
                                              "messages": [{"role": "user", "content": "Hi [demo:pace=0]"}]})
    assert enabled["thinking"] == {"type": "enabled"} and disabled["thinking"] == {"type": "disabled"}
