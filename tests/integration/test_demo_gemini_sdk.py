"""The google-genai SDK against the demo upstream's Gemini face over a real socket: its own SSE
reader, its function-calling loop and its thought-signature handling, with nothing in between — so
what the demo sends is what the real client parses, before any proxy stands in front of it."""

from __future__ import annotations

from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from proxy.demo.scenarios import ANSWER
from tests.conftest import DemoUpstream

pytestmark = pytest.mark.live

BASH = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="Bash", description="run a command", parameters_json_schema={
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})])


def client(demo: DemoUpstream, version: str | None = None) -> genai.Client:
    """The SDK pointed at the demo (its default API version is `v1`; gemini-cli's is `v1beta`)."""
    options = types.HttpOptions(base_url=demo.root, timeout=20_000, api_version=version)
    return genai.Client(api_key="sk-gemini-sdk", http_options=options)


def test_the_sdk_streams_the_answer_and_reads_the_usage(demo_upstream: DemoUpstream) -> None:
    sdk = client(demo_upstream)  # kept: the SDK closes its HTTP client when the Client object goes
    chunks = list(sdk.models.generate_content_stream(model="demo-model", contents="Hello! [demo:pace=0]"))
    assert "".join(c.text or "" for c in chunks) == ANSWER
    usage = chunks[-1].usage_metadata
    assert usage is not None and usage.total_token_count == (usage.prompt_token_count or 0) + (
        usage.candidates_token_count or 0)
    assert chunks[-1].candidates and chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP


def test_the_sdk_counts_tokens_and_lists_models(demo_upstream: DemoUpstream) -> None:
    sdk = client(demo_upstream)
    assert (sdk.models.count_tokens(model="demo-model", contents="Count me.").total_tokens or 0) > 0
    names = [m.name for m in sdk.models.list(config={"page_size": 4})]
    assert "models/gemini-3-pro-preview" in names and len(names) == len(set(names)) == 9


def test_a_gemini_3_tool_chain_through_the_sdks_chat_keeps_its_signatures(demo_upstream: DemoUpstream) -> None:
    """The SDK's chat keeps each model content as it came, signatures included: the demo's
    enforcement lets each step through (the SDK sends them back URL-safe), and the chain ends with
    every output quoted."""
    sdk = client(demo_upstream, "v1beta")
    chat = sdk.chats.create(model="gemini-3-pro-preview", config=types.GenerateContentConfig(
        tools=[BASH], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)))
    answer = chat.send_message("go [demo:chain=3] [demo:pace=0]")
    for _ in range(3):
        (call,) = answer.function_calls or []
        assert call.name == "Bash" and answer.candidates
        parts: list[Any] = answer.candidates[0].content.parts if answer.candidates[0].content else []
        assert parts and parts[0].thought_signature  # bytes to the SDK: base64 on the wire
        output = str((call.args or {})["command"])[len("echo "):]
        answer = chat.send_message(types.Part.from_function_response(name="Bash", response={"output": output}))
    assert answer.text == ("The tools returned, in order: step1 | step1 step2 | step1 step2 step3. "
                           "That completes the task.")


def test_a_history_without_its_signatures_is_refused_as_gemini_3_does(demo_upstream: DemoUpstream) -> None:
    sdk = client(demo_upstream, "v1beta")
    contents = [types.Content(role="user", parts=[types.Part(text="go [demo:chain=3] [demo:pace=0]")]),
                types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
                    name="Bash", args={"command": "echo step1"}))]),
                types.Content(role="user", parts=[types.Part.from_function_response(
                    name="Bash", response={"output": "step1"})])]
    with pytest.raises(errors.ClientError) as refused:
        sdk.models.generate_content(model="gemini-3-pro-preview", contents=contents,
                                    config=types.GenerateContentConfig(tools=[BASH]))
    assert refused.value.code == 400 and "missing a thought_signature" in str(refused.value.message)
