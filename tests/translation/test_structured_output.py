"""Every way a client asks for JSON, on its way to every upstream protocol, as golden transcripts
(`tests/golden/structured_output/<case>__to__<upstream>.json`: the client's body and the body the
upstream gets): Chat `response_format` json_object / json_schema (strict and not), Responses
`text.format` (json_schema, json_object), Anthropic `output_config.format` and the
`structured-outputs-2025-11-13` beta's `output_format`, and a tool forced with `tool_choice` as
instructor does, in each protocol. Each reaches the upstream in that protocol's own form; any JSON
object, which Messages has no mode for, goes as a forced tool (proxy/ir/json_tool.py) — and that
tool's call comes back as the answer's text (`json_tool_answer.sse` in tests/fixtures/sse/messages,
run through every client by test_upstream_matrix.py, and the whole answer below).
`UPDATE_GOLDEN=1` rewrites them; review the diff."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.config import Account, Upstream
from proxy.ir import response as ir
from proxy.ir.json_tool import JSON_TOOL
from proxy.ir.request import TextPart
from proxy.protocols import registry
from proxy.protocols.exchange import Exchange
from proxy.protocols.messages.upstream_response import decode as decode_messages
from tests.translation.golden import check_golden

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
          "required": ["city", "temperature"], "additionalProperties": False}
SAY = "What is the weather in Paris? Answer as JSON."
EXTRACT_TOOL_CHAT = {"type": "function", "function": {"name": "Weather", "description": "Correctly extracted `Weather`",
                                                      "parameters": SCHEMA}}

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat_json_object": ("chat_completions", {
        "model": "m", "messages": [{"role": "user", "content": SAY}], "response_format": {"type": "json_object"}}),
    "chat_json_schema_strict": ("chat_completions", {
        "model": "m", "messages": [{"role": "user", "content": SAY}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}}}),
    "chat_json_schema_loose": ("chat_completions", {
        "model": "m", "messages": [{"role": "user", "content": SAY}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}}),
    "chat_forced_tool": ("chat_completions", {  # instructor's TOOLS mode
        "model": "m", "messages": [{"role": "user", "content": SAY}], "tools": [EXTRACT_TOOL_CHAT],
        "tool_choice": {"type": "function", "function": {"name": "Weather"}}}),
    "responses_text_format_json_schema": ("responses", {
        "model": "m", "input": SAY,
        "text": {"format": {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}}}),
    "responses_text_format_json_object": ("responses", {
        "model": "m", "input": SAY, "text": {"format": {"type": "json_object"}}}),
    "responses_forced_tool": ("responses", {
        "model": "m", "input": SAY, "tools": [{"type": "function", "name": "Weather", "parameters": SCHEMA,
                                               "strict": True}],
        "tool_choice": {"type": "function", "name": "Weather"}}),
    "messages_output_config_format": ("messages", {
        "model": "m", "max_tokens": 512, "messages": [{"role": "user", "content": SAY}],
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}}),
    "messages_output_format_beta": ("messages", {  # litellm 1.110's response_format on Claude models
        "model": "m", "max_tokens": 512, "messages": [{"role": "user", "content": SAY}],
        "output_format": {"type": "json_schema", "schema": SCHEMA}}),
    "messages_forced_tool": ("messages", {  # instructor's ANTHROPIC_TOOLS mode
        "model": "m", "max_tokens": 512, "messages": [{"role": "user", "content": SAY}],
        "tools": [{"name": "Weather", "description": "Correctly extracted `Weather`", "input_schema": SCHEMA}],
        "tool_choice": {"type": "tool", "name": "Weather"}}),
}
UPSTREAMS = ("chat_completions", "messages", "responses")


def upstream_of(protocol: str) -> Upstream:
    return Upstream(name="u", protocol=protocol, base_url="https://upstream.invalid/v1",
                    accounts=(Account("a", "sk-test"),))


def upstream_body(client: str, body: dict[str, Any], protocol: str) -> dict[str, Any]:
    """What the relay sends: the client's body passed through, or decoded and encoded again."""
    up = upstream_of(protocol)
    if client == protocol:
        passthrough = registry.get(protocol).passthrough
        assert passthrough is not None
        ex = Exchange(protocol=client, body=body, model="m", stream=False, request_id="r")
        return passthrough.prepare_request(ex, json.loads(json.dumps(body)), "upstream-model", up)
    request = registry.get(client).client.decode_request(json.loads(json.dumps(body)))
    return registry.get(protocol).upstream.encode_request(request, "upstream-model", up)


@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_way_of_asking_for_json_reaches_each_upstream_in_its_own_form(case: str, upstream: str) -> None:
    client, body = CASES[case]
    sent = upstream_body(client, body, upstream)
    check_golden(f"structured_output/{case}__to__{upstream}.json",
                 json.dumps({"client": client, "client_body": body, "upstream": upstream, "upstream_body": sent},
                            indent=1, ensure_ascii=False, sort_keys=True) + "\n")


def test_json_asked_of_a_messages_upstream_travels_in_a_form_it_has() -> None:
    """The rules the goldens above show, said once more as assertions."""
    for case in ("messages_output_format_beta", "messages_output_config_format"):  # passed through as sent
        client, body = CASES[case]
        # (plus the automatic prompt caching the upstream's default `prompt_cache: auto` asks for)
        assert upstream_body(client, body, "messages") == {**body, "model": "upstream-model",
                                                           "cache_control": {"type": "ephemeral"}}
    for case in ("chat_json_schema_strict", "responses_text_format_json_schema"):
        client, body = CASES[case]
        sent = upstream_body(client, body, "messages")
        assert sent["output_config"]["format"] == {"type": "json_schema", "schema": SCHEMA}, case
    for case in ("chat_json_object", "responses_text_format_json_object"):
        client, body = CASES[case]
        sent = upstream_body(client, body, "messages")
        assert sent["tool_choice"] == {"type": "tool", "name": JSON_TOOL}
        assert [t["name"] for t in sent["tools"]] == [JSON_TOOL] and "output_config" not in sent
    beta = upstream_body(*CASES["messages_output_format_beta"], "chat_completions")  # type: ignore[call-arg]
    assert beta["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": SCHEMA}}
    beta_responses = upstream_body(*CASES["messages_output_format_beta"], "responses")  # type: ignore[call-arg]
    assert beta_responses["text"]["format"]["schema"] == SCHEMA


def test_a_messages_upstreams_call_of_the_json_tool_comes_back_as_the_answers_text() -> None:
    answer = decode_messages({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "stop_reason": "tool_use",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": JSON_TOOL,
                     "input": {"city": "Paris", "temperature": 21}}],
        "usage": {"input_tokens": 10, "output_tokens": 5}})
    assert answer.finish_reason == ir.STOP
    (part,) = answer.output
    assert isinstance(part, TextPart) and json.loads(part.text) == {"city": "Paris", "temperature": 21}
    for protocol in UPSTREAMS:  # and each client sees a plain JSON answer
        ex = Exchange(protocol=protocol, body={"model": "m"}, model="m", stream=False, request_id="r")
        encoded = json.dumps(registry.get(protocol).client.encode_response(answer, ex).body)
        assert JSON_TOOL not in encoded and "Paris" in encoded
