"""Chat request → IR → Chat request: what a translated Chat upstream would receive."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from proxy.config import Account, ReasoningOptions, Upstream
from proxy.errors import ProxyError
from proxy.ir.request import ImagePart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from proxy.protocols.chat_completions import request, upstream_request

BODY = {
    "model": "m",
    "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR", "detail": "low"}}]},
        {"role": "assistant", "content": None, "reasoning_content": "look it up",
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "result"},
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "max_completion_tokens": 100, "temperature": 0.2, "stop": "END", "reasoning_effort": "low",
    "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": True}},
    "logprobs": True,
}


PLAIN = Upstream(name="u", protocol="chat_completions", base_url="http://u/v1", accounts=(Account("a", "k"),))
DEEPSEEK = Upstream(name="d", protocol="chat_completions", base_url="http://d/v1", accounts=(Account("a", "k"),),
                    reasoning=ReasoningOptions(passback="always", control="deepseek"), max_output_tokens=50,
                    max_tokens_field="max_completion_tokens")


def test_decode_builds_the_ir() -> None:
    req = request.decode(BODY)
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool"]
    image = req.messages[1].parts[1]
    assert isinstance(image, ImagePart) and (image.media_type, image.data, image.detail) == ("image/png", "iVBOR", "low")
    assistant = req.messages[2].parts
    assert isinstance(assistant[0], ReasoningPart) and isinstance(assistant[1], ToolCallPart)
    result = req.messages[3].parts[0]
    assert isinstance(result, ToolResultPart) and result.call_id == "call_1"
    assert isinstance(result.content[0], TextPart) and result.content[0].text == "result"
    assert req.tool_choice is not None and (req.tool_choice.mode, req.tool_choice.name) == ("tool", "f")
    assert (req.max_tokens, req.stop, req.include_usage) == (100, ["END"], True)
    assert req.reasoning is not None and req.reasoning.effort == "low"
    assert req.response_format is not None and req.response_format.strict is True
    assert req.extras == {"logprobs": True}


def test_encode_gives_back_an_equivalent_chat_body() -> None:
    out = upstream_request.encode(request.decode(BODY), "upstream-m", PLAIN)
    assert out["model"] == "upstream-m"
    assert out["messages"][1]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR",
                                                                                  "detail": "low"}}
    assert out["messages"][2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}],
        "reasoning_content": "look it up"}  # reasoning.passback: auto, on a tool-call message
    assert out["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "result"}
    assert out["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert out["stream_options"] == {"include_usage": True}
    assert out["response_format"]["json_schema"]["strict"] is True
    assert out["max_tokens"] == 100 and "reasoning_effort" not in out and "thinking" not in out
    deepseek = upstream_request.encode(request.decode(BODY), "m", DEEPSEEK)
    assert deepseek["messages"][2]["reasoning_content"] == "look it up"
    assert deepseek["thinking"] == {"type": "enabled"}
    assert deepseek["max_completion_tokens"] == 50 and "max_tokens" not in deepseek


def test_custom_tools_become_one_string_argument_functions() -> None:
    body = {"model": "m", "messages": [
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}]}],
        "tools": [{"type": "custom", "custom": {"name": "apply_patch", "format": {"type": "grammar", "definition": "start: x"}}}]}
    out = upstream_request.encode(request.decode(body), "m", PLAIN)
    assert out["tools"][0]["function"]["parameters"]["required"] == ["input"]
    assert "start: x" in out["tools"][0]["function"]["description"]
    assert json.loads(out["messages"][0]["tool_calls"][0]["function"]["arguments"]) == {"input": "*** Begin"}


@pytest.mark.parametrize(("body", "message"), [
    ({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id: is required"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes"}, "tool_choice: must be"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}},
     "response_format.type: must be one of"),
])
def test_decode_errors_name_the_field(body: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ProxyError) as caught:
        request.decode(body)
    assert caught.value.info.status == 400 and message in caught.value.info.message


@pytest.mark.parametrize(("control", "reasoning", "expected"), [
    ("reasoning_effort", {"effort": "high"}, {"reasoning_effort": "high"}),
    ("reasoning_effort", {"enabled": True, "budget_tokens": 1024}, {"reasoning_effort": "low"}),
    ("reasoning_effort", {"enabled": True, "budget_tokens": 30000}, {"reasoning_effort": "high"}),
    ("reasoning_effort", {"enabled": False}, {}),
    ("deepseek", {"enabled": True}, {"thinking": {"type": "enabled"}}),
    ("deepseek", {"enabled": False}, {"thinking": {"type": "disabled"}}),
    ("qwen", {"enabled": True, "budget_tokens": 4096}, {"enable_thinking": True, "thinking_budget": 4096}),
    ("openrouter", {"enabled": True, "budget_tokens": 4096}, {"reasoning": {"max_tokens": 4096}}),
    ("openrouter", {"effort": "low"}, {"reasoning": {"effort": "low"}}),
    ("none", {"effort": "high"}, {}),
])
def test_reasoning_controls(control: str, reasoning: dict, expected: dict) -> None:  # type: ignore[type-arg]
    from proxy.ir.request import Reasoning

    assert upstream_request.reasoning_fields(Reasoning(**reasoning), control) == expected


def test_no_tool_choice_goes_to_a_chat_upstream_without_tools(caplog: Any) -> None:
    """Only hosted tools were given (a Responses client's web_search), which a Chat upstream cannot
    run: the tool_choice goes with them — OpenAI-compatible servers answer 400 to a tool_choice
    without tools — and one log line says so."""
    from proxy.protocols import registry

    decoded = registry.get("responses").client.decode_request(
        {"model": "m", "input": "find it", "tools": [{"type": "web_search"}], "tool_choice": "required"})
    assert decoded.tools == [] and decoded.tool_choice is not None
    with caplog.at_level(logging.INFO):
        body = upstream_request.encode(decoded, "m", PLAIN)
    assert "tool_choice" not in body and "tools" not in body
    assert caplog.text.count("dropping tool_choice 'required': no function tool is left") == 1
