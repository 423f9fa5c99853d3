"""One upstream quirk, one fix: an OpenAI-compatible upstream's quirk reaches every client fixed
the same way, whether a Chat client's answer is passed through or another client's is translated.

The quirk here: a finish reason that says the answer stopped ("stop", or a server's own word for
it, "eos", "end_turn") after the model called a tool. Clients run tools only when the answer says
so — Chat's `tool_calls`, Anthropic's `tool_use`, a Responses `function_call` item — so each
client must be told the calls are to be run. The real SDKs read the answers from a live proxy in
front of the simulated upstream replaying exact bytes (`/_demo/script`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import anthropic
import pytest
from openai import OpenAI

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer

STOP_WORDS = ("stop", "eos", "end_turn")
ARGUMENTS = '{"city": "Paris"}'


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return "data: " + json.dumps({"id": "chatcmpl-q", "object": "chat.completion.chunk", "created": 1,
                                  "model": "demo-model",
                                  "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"


def stream_with_a_call(finish: str) -> dict[str, Any]:
    call = {"index": 0, "id": "call_q1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    steps = [chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
             chunk({"tool_calls": [{"index": 0, "function": {"arguments": ARGUMENTS}}]}),
             chunk({}, finish), "data: [DONE]\n\n"]
    return {"steps": [{"send": step} for step in steps]}


def body_with_a_call(finish: str) -> dict[str, Any]:
    completion = {
        "id": "chatcmpl-q", "object": "chat.completion", "created": 1, "model": "demo-model",
        "choices": [{"index": 0, "finish_reason": finish, "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": "call_q1", "type": "function",
                            "function": {"name": "get_weather", "arguments": ARGUMENTS}}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    }
    return {"status": 200, "headers": {"Content-Type": "application/json"}, "body": json.dumps(completion)}


def scripted(demo: DemoUpstream, answer: dict[str, Any]) -> str:
    request_id = "quirk-" + uuid.uuid4().hex
    demo.control(f"/_demo/script?request_id={request_id}", body=[answer])
    return request_id


def openai_client(proxy: ProxyServer) -> OpenAI:
    return OpenAI(base_url=f"{proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)


CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
HI = [{"role": "user", "content": "weather?"}]


@pytest.mark.parametrize("finish", STOP_WORDS)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_chat_client_passed_through_is_told_to_run_its_tools(proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                              finish: str, stream: bool) -> None:
    answer = stream_with_a_call(finish) if stream else body_with_a_call(finish)
    request_id = scripted(demo_upstream, answer)
    headers = {"X-Request-Id": request_id}
    if stream:
        with openai_client(proxy).chat.completions.stream(model="demo-model", messages=HI, tools=CHAT_TOOLS,
                                                          extra_headers=headers) as events:
            completion = events.get_final_completion()
    else:
        completion = openai_client(proxy).chat.completions.create(model="demo-model", messages=HI, tools=CHAT_TOOLS,
                                                                  extra_headers=headers)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert (call.id, call.function.name, call.function.arguments) == ("call_q1", "get_weather", ARGUMENTS)
    (seen,) = demo_upstream.requests(request_id)
    assert seen["path"] == "/v1/chat/completions" and bool(seen["body"].get("stream")) is stream


@pytest.mark.parametrize("finish", STOP_WORDS)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_messages_client_translated_is_told_to_use_its_tools(proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                             finish: str, stream: bool) -> None:
    answer = stream_with_a_call(finish) if stream else body_with_a_call(finish)
    request_id = scripted(demo_upstream, answer)
    client = anthropic.Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0, timeout=20)
    tools: Any = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    headers = {"X-Request-Id": request_id}
    if stream:
        with client.messages.stream(model="demo-model", max_tokens=100, messages=HI, tools=tools,
                                    extra_headers=headers) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(model="demo-model", max_tokens=100, messages=HI,
                                         tools=tools, extra_headers=headers)
    assert message.stop_reason == "tool_use"
    (block,) = message.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == {"city": "Paris"}
    (seen,) = demo_upstream.requests(request_id)
    assert seen["path"] == "/v1/chat/completions"


@pytest.mark.parametrize("finish", STOP_WORDS)
def test_responses_client_translated_gets_the_call_to_run(proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                         finish: str) -> None:
    request_id = scripted(demo_upstream, stream_with_a_call(finish))
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": False}]
    with openai_client(proxy).responses.stream(model="demo-model", input="weather?", tools=tools, store=False,
                                               extra_headers={"X-Request-Id": request_id}) as events:
        response = events.get_final_response()
    assert response.status == "completed"
    (item,) = response.output
    assert item.type == "function_call" and item.name == "get_weather" and item.arguments == ARGUMENTS
    (seen,) = demo_upstream.requests(request_id)
    assert seen["path"] == "/v1/chat/completions"
