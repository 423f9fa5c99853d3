"""The Gemini upstream side: the request the proxy sends (`upstream_request.encode`), the OpenAPI
subset of `tool_schema: openapi` upstreams (`schema.openapi_subset`), the whole answer
(`upstream_response.decode`) and the stream (`GeminiStreamDecoder`) read back into the IR, field
spelling (`spelling.camel_keys`) and the model list (`catalog`).

The signature tests (docs/protocols.md §9.6) each fail if a signature is dropped, moved to another
part, or sent to an upstream or model that did not issue it. Fixtures are written from the documented
shapes — docs/protocols.md §9.6 and §16, stored copies of the Gemini API reference (the v1beta Schema
object, ListModelsRequest) and google-genai's own types (types.Schema, installed 3.6.1) — read on
2026-11-28; the real API cannot be reached from here."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config import Upstream
from proxy.config.model import Account
from proxy.errors import ProxyError
from proxy.ir import response as ir
from proxy.ir.custom_calls import CUSTOM_TOOL_PARAMETERS
from proxy.ir.events import BlockStart, BlockStop, Cite, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.fold import check_well_formed, fold
from proxy.ir.reasoning import (
    anthropic_to_encrypted,
    encrypted_to_signature,
    gemini_envelope,
    gemini_from_envelope,
    mint_signature,
)
from proxy.ir.request import (
    Citation,
    FilePart,
    ImagePart,
    Message,
    Part,
    Reasoning,
    ReasoningPart,
    Request,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.gemini import catalog
from proxy.protocols.gemini.schema import openapi_subset
from proxy.protocols.gemini.spelling import camel_keys
from proxy.protocols.gemini.stream_decode import GeminiStreamDecoder
from proxy.protocols.gemini.upstream_request import encode
from proxy.protocols.gemini.upstream_response import decode
from proxy.protocols.gemini.vocabulary import SKIP_SIGNATURE
from proxy.protocols.sse import SSEParser

G3 = "gemini-3-pro-preview"
G25 = "gemini-2.5-flash"
SKIP = SKIP_SIGNATURE


def upstream(name: str = "gem", **fields: Any) -> Upstream:
    return Upstream(name=name, protocol="gemini", base_url="https://generativelanguage.googleapis.com",
                    accounts=(Account("a", "k"),), **fields)


GEM = upstream()
OPENAPI = upstream(tool_schema="openapi")


def user(*parts: Part | str) -> Message:
    return Message("user", [TextPart(p) if isinstance(p, str) else p for p in parts])


def assistant(*parts: Part | str) -> Message:
    return Message("assistant", [TextPart(p) if isinstance(p, str) else p for p in parts])


def tool(call_id: str, content: str, is_error: bool = False) -> Message:
    return Message("tool", [ToolResultPart(call_id, [TextPart(content)], is_error=is_error)])


def req(*messages: Message, model: str = G3, **fields: Any) -> Request:
    return Request(model=model, messages=list(messages), **fields)


def sent(request: Request, model: str = G3, up: Upstream = GEM) -> dict[str, Any]:
    return encode(request, model, up)


def env(signature: str, placement: str, origin: str = f"gem/{G3}") -> str:
    return gemini_envelope(signature, origin, placement)


def call(call_id: str, name: str, args: str = "{}") -> ToolCallPart:
    return ToolCallPart(id=call_id, name=name, arguments=args)


def fcall(call_id: str, name: str, args: dict[str, Any] | None = None, sig: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"id": call_id, "name": name, "args": args or {}}}
    if sig is not None:
        part["thoughtSignature"] = sig
    return part


def fresult(call_id: str, name: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"functionResponse": {"id": call_id, "name": name, "response": response}}


def all_signatures(body: Any) -> list[str]:
    """Every thoughtSignature anywhere in a body, in order."""
    if isinstance(body, list):
        return [s for item in body for s in all_signatures(item)]
    if not isinstance(body, dict):
        return []
    own = [body["thoughtSignature"]] if "thoughtSignature" in body else []
    return own + [s for k, v in body.items() if k != "thoughtSignature" for s in all_signatures(v)]


# ================================================================ encode: roles and contents


def test_roles_user_and_assistant_become_user_and_model() -> None:
    assert sent(req(user("hi"), assistant("hello"), user("bye"))) == {"contents": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"text": "hello"}]},
        {"role": "user", "parts": [{"text": "bye"}]}]}


def test_leading_system_and_developer_messages_become_system_instruction() -> None:
    body = sent(req(Message("system", [TextPart("be brief")]), Message("developer", [TextPart("use tools")]),
                    user("hi")))
    assert body == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                    "systemInstruction": {"parts": [{"text": "be brief"}, {"text": "use tools"}]}}


def test_a_system_message_mid_conversation_becomes_user_text() -> None:
    body = sent(req(Message("system", [TextPart("top")]), user("hi"), assistant("hello"),
                    Message("system", [TextPart("remember"), TextPart("this")]), user("next")))
    assert body["systemInstruction"] == {"parts": [{"text": "top"}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"text": "hello"}]},
        # no system role in contents: user text, merged with the user turn that follows it
        {"role": "user", "parts": [{"text": "System instruction: remember\nthis"}, {"text": "next"}]}]


def test_empty_messages_and_empty_text_are_left_out() -> None:
    body = sent(req(user("hi"), assistant(""), user(TextPart("")), user("again")))
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}, {"text": "again"}]}]


def test_consecutive_tool_results_are_one_user_content_with_names_and_ids() -> None:
    body = sent(req(user("list two dirs"),
                    assistant(call("c1", "ls", '{"dir": "/a"}'), call("c2", "ls_long", '{"dir": "/b"}')),
                    tool("c1", "a.txt"), tool("c2", '{"files": ["b.txt"]}')))
    assert body["contents"][1:] == [
        {"role": "model", "parts": [fcall("c1", "ls", {"dir": "/a"}, SKIP), fcall("c2", "ls_long", {"dir": "/b"})]},
        {"role": "user", "parts": [fresult("c1", "ls", {"result": "a.txt"}),
                                   fresult("c2", "ls_long", {"files": ["b.txt"]})]}]


def test_a_result_that_is_a_json_object_is_sent_as_that_object_and_text_as_result() -> None:
    body = sent(req(user("q"), assistant(call("c1", "f"), call("c2", "g"), call("c3", "h")),
                    tool("c1", '{"ok": true, "n": 3}'), tool("c2", "[1, 2]"), tool("c3", "")))
    assert body["contents"][2]["parts"] == [
        fresult("c1", "f", {"ok": True, "n": 3}),
        fresult("c2", "g", {"result": "[1, 2]"}),  # JSON, but not an object: `response` must be one
        fresult("c3", "h", {"result": ""})]


def test_an_error_result_is_sent_as_error() -> None:
    body = sent(req(user("q"), assistant(call("c1", "f"), call("c2", "g")),
                    tool("c1", "permission denied", is_error=True), tool("c2", '{"code": 13}', is_error=True)))
    assert body["contents"][2]["parts"] == [fresult("c1", "f", {"error": "permission denied"}),
                                            fresult("c2", "g", {"code": 13})]


def test_a_result_whose_call_is_unknown_names_the_id() -> None:
    body = sent(req(user("q"), tool("lost", "x")))
    assert body["contents"] == [{"role": "user", "parts": [{"text": "q"}, fresult("lost", "lost", {"result": "x"})]}]


def test_images_inline_data_url_and_http_url() -> None:
    body = sent(req(user(ImagePart(data="iVBORw0K", media_type="image/png"),
                         ImagePart(data="R0lGOD"),
                         ImagePart(url="data:image/webp;base64,UklGRg=="),
                         ImagePart(url="https://example.com/cat.jpg", media_type="image/jpeg"),
                         ImagePart(url="https://example.com/dog"),
                         "what are these?")))
    assert body["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}},
        {"inlineData": {"mimeType": "image/png", "data": "R0lGOD"}},
        {"inlineData": {"mimeType": "image/webp", "data": "UklGRg=="}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/dog"}},
        {"text": "what are these?"}]


def test_files_inline_and_by_url_and_a_file_id_left_out() -> None:
    body = sent(req(user(FilePart(data="JVBERi0", media_type="application/pdf"),
                         FilePart(url="https://example.com/a.pdf"), FilePart(file_id="file-abc"), "summarise")))
    assert body["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0"}},
        {"fileData": {"mimeType": "application/pdf", "fileUri": "https://example.com/a.pdf"}},
        {"text": "summarise"}]


# ================================================================ encode: tools and tool choice

SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
          "properties": {"path": {"type": "string", "default": "."}, "depth": {"type": ["integer", "null"]}},
          "required": ["path"], "additionalProperties": False}


def test_tools_are_function_declarations_with_the_json_schema_as_given() -> None:
    body = sent(req(user("q"), tools=[Tool("ls", "List a directory", SCHEMA), Tool("now")]))
    assert body["tools"] == [{"functionDeclarations": [
        {"name": "ls", "description": "List a directory", "parametersJsonSchema": SCHEMA},
        {"name": "now"}]}]


def test_an_openapi_upstream_gets_the_reduced_schema_as_parameters() -> None:
    body = sent(req(user("q"), tools=[Tool("ls", "List a directory", SCHEMA)]), up=OPENAPI)
    assert body["tools"] == [{"functionDeclarations": [{"name": "ls", "description": "List a directory", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "depth": {"type": "integer", "nullable": True}},
        "required": ["path"]}}]}]


def test_a_custom_tool_is_a_function_taking_one_string() -> None:
    body = sent(req(user("q"), tools=[Tool("apply_patch", "Patch files", kind="custom",
                                           format={"type": "grammar", "definition": "start: x"})]))
    declaration = body["tools"][0]["functionDeclarations"][0]
    assert declaration == {"name": "apply_patch",
                           "description": "Patch files\n\nThe input must follow this grammar:\nstart: x",
                           "parametersJsonSchema": CUSTOM_TOOL_PARAMETERS}
    assert CUSTOM_TOOL_PARAMETERS["properties"] == {"input": {"type": "string",
                                                              "description": "The raw input for this tool."}}


@pytest.mark.parametrize(("choice", "config"), [
    (ToolChoice("auto"), {"mode": "AUTO"}),
    (ToolChoice("required"), {"mode": "ANY"}),
    (ToolChoice("none"), {"mode": "NONE"}),
    (ToolChoice("tool", name="ls"), {"mode": "ANY", "allowedFunctionNames": ["ls"]}),
    (ToolChoice("required", allowed=["ls", "cat"]), {"mode": "ANY", "allowedFunctionNames": ["ls", "cat"]}),
    (ToolChoice("auto", allowed=["ls"]), {"mode": "AUTO"}),  # Gemini takes the names with ANY only
])
def test_tool_choice_is_function_calling_config(choice: ToolChoice, config: dict[str, Any]) -> None:
    body = sent(req(user("q"), tools=[Tool("ls"), Tool("cat")], tool_choice=choice))
    assert body["toolConfig"] == {"functionCallingConfig": config}


def test_no_tool_config_without_tools() -> None:
    assert "toolConfig" not in sent(req(user("q"), tool_choice=ToolChoice("required")))


# ================================================================ encode: generationConfig and thinking


def test_generation_config_fields() -> None:
    body = sent(req(user("q"), temperature=0.2, top_p=0.9, top_k=40, max_tokens=1000, stop=["END", "STOP"], seed=7,
                    presence_penalty=0.5, frequency_penalty=-0.5), model=G25)
    assert body["generationConfig"] == {"temperature": 0.2, "topP": 0.9, "topK": 40, "seed": 7,
                                        "presencePenalty": 0.5, "frequencyPenalty": -0.5, "maxOutputTokens": 1000,
                                        "stopSequences": ["END", "STOP"]}


def test_no_generation_config_when_nothing_is_asked() -> None:
    assert "generationConfig" not in sent(req(user("q")))


@pytest.mark.parametrize(("asked", "cap", "expected"), [(1000, 500, 500), (100, 500, 100), (None, 500, 500),
                                                         (None, None, None)])
def test_max_output_tokens_is_capped_by_the_upstream(asked: int | None, cap: int | None,
                                                     expected: int | None) -> None:
    body = sent(req(user("q"), max_tokens=asked), up=upstream(max_output_tokens=cap))
    assert body.get("generationConfig", {}).get("maxOutputTokens") == expected


def test_json_object_and_json_schema_response_formats() -> None:
    schema = {"type": "object", "properties": {"n": {"const": 1}}, "additionalProperties": False}
    as_object = sent(req(user("q"), response_format=ResponseFormat("json_object")))
    assert as_object["generationConfig"] == {"responseMimeType": "application/json"}
    as_schema = sent(req(user("q"), response_format=ResponseFormat("json_schema", name="n", schema=schema)))
    assert as_schema["generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": schema}
    openapi = sent(req(user("q"), response_format=ResponseFormat("json_schema", name="n", schema=schema)), up=OPENAPI)
    assert openapi["generationConfig"] == {"responseMimeType": "application/json", "responseSchema": {
        "type": "object", "properties": {"n": {"enum": ["1"]}}}}
    assert "generationConfig" not in sent(req(user("q"), response_format=ResponseFormat("text")))


@pytest.mark.parametrize(("reasoning", "model", "thinking"), [
    (Reasoning(effort="high"), G3, {"thinkingLevel": "high", "includeThoughts": True}),
    (Reasoning(effort="low"), G3, {"thinkingLevel": "low", "includeThoughts": True}),
    (Reasoning(effort="minimal"), "gemini-3-flash-preview", {"thinkingLevel": "low", "includeThoughts": True}),
    (Reasoning(budget_tokens=16000), G3, {"thinkingLevel": "high", "includeThoughts": True}),
    (Reasoning(budget_tokens=2048), G3, {"thinkingLevel": "low", "includeThoughts": True}),
    (Reasoning(enabled=False), G3, {"thinkingLevel": "low"}),
    (Reasoning(effort="none"), G3, {"thinkingLevel": "low"}),
    (Reasoning(effort="high"), G25, {"thinkingBudget": 16384, "includeThoughts": True}),
    (Reasoning(effort="low"), G25, {"thinkingBudget": 2048, "includeThoughts": True}),
    (Reasoning(budget_tokens=5000), G25, {"thinkingBudget": 5000, "includeThoughts": True}),
    (Reasoning(enabled=True), G25, {"thinkingBudget": 8192, "includeThoughts": True}),
    (Reasoning(enabled=False), G25, {"thinkingBudget": 0}),
    (Reasoning(effort="high"), "models/gemini-3-pro-preview", {"thinkingLevel": "high", "includeThoughts": True}),
])
def test_thinking_level_for_gemini_3_budget_before(reasoning: Reasoning, model: str,
                                                    thinking: dict[str, Any]) -> None:
    body = encode(req(user("q"), reasoning=reasoning), model, GEM)
    assert body["generationConfig"] == {"thinkingConfig": thinking}


def test_gemini_extras_are_kept_and_another_protocols_are_never_sent() -> None:
    safety = [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]
    body = sent(req(user("q"), extras={"safetySettings": safety, "cachedContent": "cachedContents/abc",
                                       "logprobs": True, "top_logprobs": 3, "service_tier": "flex",
                                       "thinking": {"type": "enabled"}}))
    assert body == {"contents": [{"role": "user", "parts": [{"text": "q"}]}], "safetySettings": safety,
                    "cachedContent": "cachedContents/abc"}


def test_gemini_extras_in_config_and_tools_are_merged() -> None:
    body = sent(req(user("q"), temperature=0.5, tools=[Tool("f")], tool_choice=ToolChoice("auto"),
                    extras={"generationConfig": {"candidateCount": 1, "responseModalities": ["TEXT"]},
                            "toolConfig": {"retrievalConfig": {"languageCode": "en"}},
                            "tools": [{"googleSearch": {}}, {"type": "web_search"}]}))
    assert body["generationConfig"] == {"candidateCount": 1, "responseModalities": ["TEXT"], "temperature": 0.5}
    assert body["toolConfig"] == {"retrievalConfig": {"languageCode": "en"}, "functionCallingConfig": {"mode": "AUTO"}}
    assert body["tools"] == [{"functionDeclarations": [{"name": "f"}]}, {"googleSearch": {}}]


# ================================================================ encode: the signature rules (§9.6)


def model_parts(*messages: Message, model: str = G3, up: Upstream = GEM) -> list[list[dict[str, Any]]]:
    """The parts of every model content sent for a conversation."""
    body = encode(req(*messages, model=model), model, up)
    return [c["parts"] for c in body["contents"] if c["role"] == "model"]


def test_placement_thought_goes_back_on_the_thought_part() -> None:
    assert model_parts(user("q"), assistant(ReasoningPart("let me see", env("SIG-T", "thought")), "42")) == [
        [{"text": "let me see", "thought": True, "thoughtSignature": "SIG-T"}, {"text": "42"}]]


def test_placement_thought_with_no_text_is_still_sent() -> None:
    assert model_parts(user("q"), assistant(ReasoningPart("", env("SIG-T", "thought")), "42")) == [
        [{"text": "", "thought": True, "thoughtSignature": "SIG-T"}, {"text": "42"}]]


def test_placement_empty_goes_back_on_an_empty_part_after_the_thought() -> None:
    assert model_parts(user("q"), assistant(ReasoningPart("let me see", env("SIG-E", "empty")), "42")) == [
        [{"text": "let me see", "thought": True}, {"text": "", "thoughtSignature": "SIG-E"}, {"text": "42"}]]


def test_placement_empty_with_no_thought_text_is_an_empty_part_where_it_was() -> None:
    assert model_parts(user("q"), assistant("42", ReasoningPart("", env("SIG-E", "empty")))) == [
        [{"text": "42"}, {"text": "", "thoughtSignature": "SIG-E"}]]


def test_placement_next_goes_back_on_the_call_that_follows() -> None:
    parts = model_parts(user("q"), assistant(ReasoningPart("plan", env("SIG-C", "next")), call("c1", "ls")),
                        tool("c1", "x"))
    assert parts == [[{"text": "plan", "thought": True}, fcall("c1", "ls", sig="SIG-C")]]


def test_placement_next_goes_back_on_the_text_that_follows() -> None:
    assert model_parts(user("q"), assistant(ReasoningPart("", env("SIG-N", "next")), "hello", "more")) == [
        [{"text": "hello", "thoughtSignature": "SIG-N"}, {"text": "more"}]]


def test_placement_prev_goes_back_on_the_text_before() -> None:
    assert model_parts(user("q"), assistant("first", "hello", ReasoningPart("", env("SIG-P", "prev")), "after")) == [
        [{"text": "first"}, {"text": "hello", "thoughtSignature": "SIG-P"}, {"text": "after"}]]


def test_every_signature_of_one_answer_keeps_its_own_part() -> None:
    parts = model_parts(user("q"), assistant(
        ReasoningPart("one", env("S1", "thought")), ReasoningPart("two", env("S2", "empty")),
        "text", ReasoningPart("", env("S3", "prev")),
        ReasoningPart("", env("S4", "next")), call("c1", "f"), call("c2", "g")), tool("c1", "a"), tool("c2", "b"))
    assert parts == [[
        {"text": "one", "thought": True, "thoughtSignature": "S1"},
        {"text": "two", "thought": True}, {"text": "", "thoughtSignature": "S2"},
        {"text": "text", "thoughtSignature": "S3"},
        fcall("c1", "f", sig="S4"), fcall("c2", "g")]]  # parallel calls: one signature, on the first


@pytest.mark.parametrize("origin", [f"gem2/{G3}", f"GEM/{G3}", "gem/gemini-2.5-pro", "gem/gemini-3-flash-preview",
                                    f"other/gem/{G3}"])
def test_an_envelope_of_another_upstream_or_model_is_not_sent_and_the_step_is_skipped(origin: str) -> None:
    body = sent(req(user("q"), assistant(ReasoningPart("secret plan", env("FOREIGN", "next", origin)), call("c1", "ls"),
                                         call("c2", "ls")), tool("c1", "a"), tool("c2", "b")))
    assert body["contents"][1] == {"role": "model", "parts": [fcall("c1", "ls", sig=SKIP), fcall("c2", "ls")]}
    assert "FOREIGN" not in json.dumps(body) and "secret plan" not in json.dumps(body)


@pytest.mark.parametrize("placement", ["thought", "empty", "prev"])
def test_an_envelope_of_another_origin_is_dropped_in_every_placement(placement: str) -> None:
    body = sent(req(user("q"), assistant("text", ReasoningPart("thinking", env("FOREIGN", placement, "other/" + G3)),
                                         "answer"), user("next")))
    assert body["contents"][1] == {"role": "model", "parts": [{"text": "text"}, {"text": "answer"}]}
    assert all_signatures(body) == []


@pytest.mark.parametrize(("origin", "model"), [
    ("gem/gemini-3-pro-preview-001", "gemini-3-pro-preview"),  # modelVersion with a version suffix
    ("gem/gemini-2.5-flash-preview-05-20", "gemini-2.5-flash"),
    ("gem/gemini-1.5-pro-002", "gemini-1.5-pro"),
    ("gem/gemini-2.5-flash", "gemini-2.5-flash-preview-09-2025"),  # asked with the suffix, answered without
])
def test_a_model_version_with_a_suffix_is_the_model_asked(origin: str, model: str) -> None:
    parts = model_parts(user("q"), assistant(ReasoningPart("", env("MINE", "next", origin)), call("c1", "ls")),
                        tool("c1", "a"), model=model)
    assert parts == [[fcall("c1", "ls", sig="MINE")]]


@pytest.mark.parametrize(("origin", "model"), [
    ("gem/gemini-2.5-flash-lite", "gemini-2.5-flash"),  # another model, not a version of the one asked
    ("gem/gemini-2.5-flash", "gemini-2.5-flash-lite"),
    ("gem/gemini-3-pro-image-preview", "gemini-3-pro"),
    ("gem/gemini-2.0-flash-thinking-exp-01-21", "gemini-2.0-flash"),
])
def test_a_model_whose_name_only_starts_like_the_one_asked_is_another_model(origin: str, model: str) -> None:
    parts = model_parts(user("q"), assistant(ReasoningPart("", env("THEIRS", "next", origin)), call("c1", "ls")),
                        tool("c1", "a"), model=model)
    assert parts == [[fcall("c1", "ls", sig=SKIP)]]


ANTHROPIC_SIGNATURE = "EqQBCkYIBxgCKkBanthropicsignature" + "x" * 40
RESPONSES_ENCRYPTED = "gAAAAABoresponsesencrypted" + "y" * 40


@pytest.mark.parametrize("part", [
    ReasoningPart("claude thought", signature=ANTHROPIC_SIGNATURE),
    ReasoningPart("", redacted="cmVkYWN0ZWQ="),
    ReasoningPart("o3 summary", encrypted=RESPONSES_ENCRYPTED, id="rs_1"),
    ReasoningPart("deepseek thought", signature=mint_signature("deepseek thought")),
    ReasoningPart("claude via codex", encrypted=anthropic_to_encrypted(ANTHROPIC_SIGNATURE, None)),
    ReasoningPart("o3 via claude code", signature=encrypted_to_signature(RESPONSES_ENCRYPTED)),
    ReasoningPart("plain reasoning_content"),
], ids=["anthropic", "redacted", "responses", "minted", "anthropic-enveloped", "responses-enveloped", "plain"])
def test_reasoning_of_other_protocols_never_reaches_the_gemini_body(part: ReasoningPart) -> None:
    body = sent(req(user("q"), assistant(part, "let me look", call("c1", "ls")), tool("c1", "a")))
    assert body["contents"][1] == {"role": "model", "parts": [{"text": "let me look"}, fcall("c1", "ls", sig=SKIP)]}
    text = json.dumps(body)
    assert "llmproxy1." not in text and ANTHROPIC_SIGNATURE not in text and RESPONSES_ENCRYPTED not in text
    assert not any("thought" in p for c in body["contents"] for p in c["parts"])


def test_the_skip_value_only_on_the_first_call_of_each_step_of_the_current_turn() -> None:
    body = sent(req(
        user("earlier turn"),
        assistant(call("o1", "old")), tool("o1", "r"),  # an earlier turn: not validated, sent as it is
        assistant(ReasoningPart("", env("OLD-SIG", "next")), call("o2", "old")), tool("o2", "r"),
        assistant("done"),
        user("current turn"),
        assistant(call("a1", "f"), call("a2", "f")), tool("a1", "r"), tool("a2", "r"),  # step 1: parallel
        assistant("thinking aloud", call("b1", "g")), tool("b1", "r"),  # step 2: text first, then the call
        assistant(ReasoningPart("", env("REAL", "next")), call("c1", "h"), call("c2", "h")),  # step 3: its own
        tool("c1", "r"), tool("c2", "r")))
    models = [c["parts"] for c in body["contents"] if c["role"] == "model"]
    assert models == [
        [fcall("o1", "old")],
        [fcall("o2", "old", sig="OLD-SIG")],  # an earlier turn's own signature is still restored
        [{"text": "done"}],
        [fcall("a1", "f", sig=SKIP), fcall("a2", "f")],
        [{"text": "thinking aloud"}, fcall("b1", "g", sig=SKIP)],
        [fcall("c1", "h", sig="REAL"), fcall("c2", "h")]]


def test_a_result_with_user_text_beside_it_starts_a_new_turn() -> None:
    body = sent(req(user("q"), assistant(call("a1", "f")),
                    Message("tool", [ToolResultPart("a1", [TextPart("r")])]), user("and now?"),
                    assistant(call("b1", "g")), tool("b1", "r")))
    assert [c["parts"] for c in body["contents"] if c["role"] == "model"] == [
        [fcall("a1", "f")], [fcall("b1", "g", sig=SKIP)]]


def test_no_skip_value_on_a_step_without_calls_or_with_a_signature_on_a_later_call() -> None:
    body = sent(req(user("q"), assistant("just text"), user("again"),
                    assistant(call("a1", "f"), ReasoningPart("", env("SECOND", "next")), call("a2", "g")),
                    tool("a1", "r"), tool("a2", "r")))
    models = [c["parts"] for c in body["contents"] if c["role"] == "model"]
    # the first call of the step has none of its own: skip there; the second keeps its own
    assert models == [[{"text": "just text"}], [fcall("a1", "f", sig=SKIP), fcall("a2", "g", sig="SECOND")]]


# ================================================================ schema.openapi_subset: one test per keyword
# Checked against the Schema object of the Gemini API reference (ai.google.dev/api/caching#Schema, as
# rendered from the v1beta discovery document) and google-genai's types.Schema. Where they differ
# from the reducer, the test says so.


def test_dollar_schema_is_dropped() -> None:
    assert openapi_subset({"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}) == {"type": "string"}


def test_dollar_id_and_comment_are_dropped() -> None:
    assert openapi_subset({"$id": "https://x/s.json", "$comment": "c", "type": "integer"}) == {"type": "integer"}


def test_defs_are_dropped_and_refs_inlined() -> None:
    schema = {"type": "object", "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}},
                                                    "additionalProperties": False}},
              "properties": {"at": {"$ref": "#/$defs/Point", "description": "where"},
                             "path": {"type": "array", "items": {"$ref": "#/$defs/Point"}}}}
    point = {"type": "object", "properties": {"x": {"type": "number"}}}
    assert openapi_subset(schema) == {"type": "object", "properties": {
        "at": {**point, "description": "where"}, "path": {"type": "array", "items": point}}}


def test_definitions_of_draft_7_are_inlined_too() -> None:
    schema = {"definitions": {"Name": {"type": "string", "minLength": 1}}, "$ref": "#/definitions/Name"}
    assert openapi_subset(schema) == {"type": "string", "minLength": 1}


def test_a_recursive_ref_is_cut_to_an_object() -> None:
    schema = {"$defs": {"Node": {"type": "object", "properties": {
        "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}},
        "$ref": "#/$defs/Node"}
    assert openapi_subset(schema) == {"type": "object", "properties": {
        "name": {"type": "string"}, "children": {"type": "array", "items": {"type": "object"}}}}


def test_an_unknown_ref_is_an_object() -> None:
    assert openapi_subset({"type": "object", "properties": {"x": {"$ref": "other.json#/X"}}}) == {
        "type": "object", "properties": {"x": {"type": "object"}}}


def test_additional_properties_is_dropped_at_every_depth() -> None:
    # google-genai's types.Schema has additional_properties (Vertex AI takes it); the Gemini API's
    # Schema object does not list it, so an upstream that wants the subset does not get it.
    schema = {"type": "object", "additionalProperties": False, "properties": {
        "env": {"type": "object", "additionalProperties": {"type": "string"}}}}
    assert openapi_subset(schema) == {"type": "object", "properties": {"env": {"type": "object"}}}


def test_pattern_properties_is_dropped() -> None:
    assert openapi_subset({"type": "object", "patternProperties": {"^x-": {"type": "string"}}}) == {"type": "object"}


def test_const_becomes_a_one_value_enum() -> None:
    assert openapi_subset({"type": "string", "const": "fixed"}) == {"type": "string", "enum": ["fixed"]}
    assert openapi_subset({"type": "integer", "const": 3}) == {"type": "integer", "enum": ["3"]}
    assert openapi_subset({"const": "a", "enum": ["a", "b"]}) == {"enum": ["a", "b"]}  # an enum already says it


def test_enum_values_that_are_not_strings_are_written_as_strings() -> None:
    # The Schema object's enum is string[] ("101", "201" for an INTEGER enum, in Google's own example).
    assert openapi_subset({"type": "integer", "enum": [1, 2, 30]}) == {"type": "integer", "enum": ["1", "2", "30"]}
    assert openapi_subset({"enum": [True, False, 1.5, "x"]}) == {"enum": ["true", "false", "1.5", "x"]}


def test_a_null_in_an_enum_is_nullable_not_the_string_none() -> None:
    assert openapi_subset({"type": ["string", "null"], "enum": ["a", "b", None]}) == {
        "type": "string", "enum": ["a", "b"], "nullable": True}
    assert openapi_subset({"enum": ["a", None]}) == {"enum": ["a"], "nullable": True}


def test_exclusive_minimum_becomes_minimum() -> None:
    assert openapi_subset({"type": "number", "exclusiveMinimum": 0}) == {"type": "number", "minimum": 0}
    assert openapi_subset({"type": "number", "minimum": 1, "exclusiveMinimum": 0}) == {"type": "number", "minimum": 1}
    # draft 4 spelled it as a flag beside minimum: the flag goes, the bound stays
    assert openapi_subset({"type": "number", "minimum": 0, "exclusiveMinimum": True}) == {"type": "number",
                                                                                          "minimum": 0}


def test_exclusive_maximum_becomes_maximum() -> None:
    assert openapi_subset({"type": "integer", "exclusiveMaximum": 100}) == {"type": "integer", "maximum": 100}
    assert openapi_subset({"type": "integer", "maximum": 5, "exclusiveMaximum": False}) == {"type": "integer",
                                                                                            "maximum": 5}


def test_a_type_list_with_null_is_nullable() -> None:
    assert openapi_subset({"type": ["string", "null"], "maxLength": 5}) == {"type": "string", "maxLength": 5,
                                                                           "nullable": True}
    assert openapi_subset({"type": ["null", "array"], "items": {"type": ["integer"]}}) == {
        "type": "array", "items": {"type": "integer"}, "nullable": True}


def test_any_of_with_a_null_branch_is_nullable_and_a_single_branch_inlined() -> None:
    schema = {"description": "when", "anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]}
    assert openapi_subset(schema) == {"type": "string", "format": "date-time", "description": "when", "nullable": True}


def test_any_of_with_a_null_branch_and_two_others_keeps_the_two() -> None:
    schema = {"anyOf": [{"type": "string"}, {"type": "integer", "exclusiveMinimum": 0}, {"type": "null"}]}
    assert openapi_subset(schema) == {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}],
                                      "nullable": True}


def test_one_of_becomes_any_of() -> None:
    assert openapi_subset({"oneOf": [{"type": "string"}, {"type": "number"}]}) == {
        "anyOf": [{"type": "string"}, {"type": "number"}]}
    assert openapi_subset({"oneOf": [{"$ref": "#/$defs/A"}, {"type": "null"}], "$defs": {"A": {"type": "boolean"}}}) \
        == {"type": "boolean", "nullable": True}


def test_all_of_is_merged() -> None:
    schema = {"description": "both", "allOf": [
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
        {"properties": {"b": {"type": "integer", "default": 1}}, "required": ["b"]}]}
    assert openapi_subset(schema) == {"description": "both", "type": "object",
                                      "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                                      "required": ["a", "b"]}


def test_default_is_dropped() -> None:
    # Disagreement, harmless: the Gemini API's Schema object lists `default` (accepted and ignored, so
    # that schemas with one do not fail); the reducer leaves it out all the same.
    assert openapi_subset({"type": "boolean", "default": False}) == {"type": "boolean"}


def test_examples_is_dropped_and_example_kept() -> None:
    # `example` (one value) is a field of the Schema object; JSON Schema's `examples` (a list) is not.
    assert openapi_subset({"type": "string", "examples": ["a", "b"], "example": "a"}) == {"type": "string",
                                                                                        "example": "a"}


@pytest.mark.parametrize("keyword", ["not", "if", "then", "else"])
def test_not_if_then_else_are_dropped(keyword: str) -> None:
    assert openapi_subset({"type": "string", keyword: {"const": "x"}}) == {"type": "string"}


def test_other_json_schema_only_keywords_are_dropped() -> None:
    schema = {"type": "string", "contentEncoding": "base64", "contentMediaType": "image/png", "readOnly": True,
              "writeOnly": False, "deprecated": True, "$anchor": "a"}
    assert openapi_subset(schema) == {"type": "string"}
    assert openapi_subset({"type": "object", "unevaluatedProperties": False, "dependentRequired": {"a": ["b"]},
                           "dependentSchemas": {"a": {}}}) == {"type": "object"}


def test_what_the_subset_has_is_kept_as_it_is() -> None:
    schema = {"type": "object", "title": "Args", "description": "d", "required": ["s"], "minProperties": 1,
              "maxProperties": 3, "propertyOrdering": ["s", "n", "l"], "properties": {
                  "s": {"type": "string", "format": "date", "pattern": "^[0-9-]+$", "minLength": 1, "maxLength": 10},
                  "n": {"type": "number", "minimum": 0, "maximum": 1, "format": "double"},
                  "l": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "string", "enum": ["a"]}}}}
    assert openapi_subset(schema) == schema


def test_property_names_that_are_keywords_are_properties() -> None:
    schema = {"type": "object", "properties": {"default": {"type": "string"}, "const": {"type": "integer"},
                                               "not": {"type": "boolean"}, "$id": {"type": "string"}}}
    assert openapi_subset(schema) == schema


def test_the_input_schema_is_not_changed() -> None:
    schema = {"type": ["string", "null"], "const": "x", "$defs": {"A": {"type": "string"}}}
    before = json.dumps(schema)
    openapi_subset(schema)
    assert json.dumps(schema) == before


# ================================================================ decode: a whole answer

MV = "gemini-3-pro-preview-001"  # the modelVersion an answer names
ORIGIN = f"gem/{MV}"


def answer(*parts: dict[str, Any], finish: str | None = "STOP", **fields: Any) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish is not None:
        cand["finishReason"] = finish
    return {"candidates": [cand], "modelVersion": MV, "responseId": "resp-1", **fields}


def test_decode_text() -> None:
    resp = decode(answer({"text": "Hello"}, {"text": " world"}), GEM)
    assert (resp.id, resp.model, resp.output, resp.finish_reason, resp.error, resp.usage) == (
        "resp-1", MV, [TextPart("Hello"), TextPart(" world")], ir.STOP, None, None)


def test_decode_thoughts_and_signatures_in_every_placement() -> None:
    resp = decode(answer({"text": "plan", "thought": True, "thoughtSignature": "S1"},
                         {"text": "more", "thought": True}, {"text": "", "thoughtSignature": "S2"},
                         {"text": "answer", "thoughtSignature": "S3"}, {"text": "", "thoughtSignature": "S4"}), GEM)
    assert resp.output == [ReasoningPart("plan", env("S1", "thought", ORIGIN)),
                           ReasoningPart("more", env("S2", "empty", ORIGIN)),
                           ReasoningPart("", env("S3", "next", ORIGIN)), TextPart("answer"),
                           ReasoningPart("", env("S4", "empty", ORIGIN))]
    assert gemini_from_envelope(env("S1", "thought", ORIGIN)) == ("S1", "gem/gemini-3-pro-preview-001", "thought")


def test_decode_thought_text_without_a_signature() -> None:
    resp = decode(answer({"text": "a", "thought": True}, {"text": "b", "thought": True}, {"text": "done"}), GEM)
    assert resp.output == [ReasoningPart("ab"), TextPart("done")]


def test_decode_function_calls_with_and_without_ids() -> None:
    doc = answer({"text": "why", "thought": True},
                 {"functionCall": {"id": "given-1", "name": "ls", "args": {"dir": "/"}}, "thoughtSignature": "SC"},
                 {"functionCall": {"name": "cat", "args": {"file": "ä"}}},
                 {"functionCall": {"name": "cat"}})
    resp = decode(doc, GEM)
    minted_1, minted_2 = (p.id for p in resp.output[2:] if isinstance(p, ToolCallPart))
    assert resp.output == [ReasoningPart("why", env("SC", "next", ORIGIN)),
                           ToolCallPart("given-1", "ls", '{"dir": "/"}'),
                           ToolCallPart(minted_1, "cat", '{"file": "ä"}'), ToolCallPart(minted_2, "cat", "{}")]
    assert resp.finish_reason == ir.TOOL_CALLS
    assert minted_1.startswith("call_") and minted_2.startswith("call_") and minted_1 != minted_2
    again = decode(json.loads(json.dumps(doc)), upstream("gem2"))
    assert [p.id for p in again.output if isinstance(p, ToolCallPart)] == ["given-1", minted_1, minted_2]
    other = decode({**doc, "responseId": "resp-2"}, GEM)
    assert [p.id for p in other.output if isinstance(p, ToolCallPart)][1:] != [minted_1, minted_2]


@pytest.mark.parametrize(("reason", "finish"), [
    ("STOP", ir.STOP), ("MAX_TOKENS", ir.LENGTH), ("SAFETY", ir.CONTENT_FILTER), ("RECITATION", ir.CONTENT_FILTER),
    ("BLOCKLIST", ir.CONTENT_FILTER), ("PROHIBITED_CONTENT", ir.CONTENT_FILTER), ("SPII", ir.CONTENT_FILTER),
    ("LANGUAGE", ir.CONTENT_FILTER), ("IMAGE_SAFETY", ir.CONTENT_FILTER), ("FINISH_REASON_UNSPECIFIED", ir.STOP),
])
def test_decode_finish_reasons(reason: str, finish: str) -> None:
    resp = decode(answer({"text": "x"}, finish=reason), GEM)
    assert (resp.finish_reason, resp.error) == (finish, None)


def test_decode_max_tokens_with_a_call_is_still_length() -> None:
    resp = decode(answer({"functionCall": {"name": "f", "args": {}}}, finish="MAX_TOKENS"), GEM)
    assert resp.finish_reason == ir.LENGTH


@pytest.mark.parametrize("reason", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", "OTHER"])
def test_decode_a_failed_finish_is_an_error_never_a_normal_stop(reason: str) -> None:
    resp = decode(answer({"text": "partial"}, finish=reason), GEM)
    assert resp.finish_reason is None and resp.error is not None
    assert (resp.error.kind, resp.error.status, resp.error.code) == ("upstream_error", 502, reason)
    assert reason in resp.error.message


def test_decode_malformed_function_call_message() -> None:
    resp = decode(answer(finish="MALFORMED_FUNCTION_CALL"), GEM)
    assert resp.error == ErrorInfo("upstream_error", "The model produced a malformed function call (Gemini finishReason "
                                                     "MALFORMED_FUNCTION_CALL); retry the request.", 502,
                                   code="MALFORMED_FUNCTION_CALL")


def test_decode_a_blocked_prompt_is_a_400_naming_the_reason() -> None:
    doc = {"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []}, "modelVersion": MV, "responseId": "r",
           "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7}}
    resp = decode(doc, GEM)
    assert resp.error == ErrorInfo("invalid_request", "The prompt was blocked by Gemini's safety filters (blockReason "
                                                      "SAFETY); change the prompt and try again.", 400, code="SAFETY")
    assert resp.output == [] and resp.usage == Usage(input_tokens=7)


def test_decode_prompt_feedback_beside_candidates_is_not_a_block() -> None:
    resp = decode({**answer({"text": "ok"}), "promptFeedback": {"safetyRatings": []}}, GEM)
    assert resp.error is None and resp.output == [TextPart("ok")]


def test_decode_usage_with_gemini_semantics() -> None:
    resp = decode(answer({"text": "x"}, usageMetadata={
        "promptTokenCount": 1000, "cachedContentTokenCount": 600, "candidatesTokenCount": 20,
        "thoughtsTokenCount": 300, "toolUsePromptTokenCount": 5, "totalTokenCount": 1325}), GEM)
    # the prompt already counts the cached tokens; candidates leave the thoughts out
    assert resp.usage == Usage(input_tokens=1005, output_tokens=320, cache_read_tokens=600, reasoning_tokens=300)
    assert resp.usage.uncached_input_tokens == 405


def test_decode_citations_on_the_first_text() -> None:
    doc = answer({"text": "Quoted text."}, {"text": " More."})
    doc["candidates"][0]["citationMetadata"] = {"citationSources": [
        {"startIndex": 0, "endIndex": 12, "uri": "https://example.com/a", "license": "mit"},
        {"startIndex": 3, "endIndex": 8}]}
    resp = decode(doc, GEM)
    assert resp.output == [TextPart("Quoted text.", citations=[
        Citation(kind="url", url="https://example.com/a", start=0, end=12, origin="gemini",
                 origin_type="citationSource", extras={"license": "mit"}),
        Citation(kind="url", start=3, end=8, origin="gemini", origin_type="citationSource")]), TextPart(" More.")]


def test_decode_an_image_answer_is_markdown_text() -> None:
    resp = decode(answer({"text": "Here:"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                         {"inlineData": {"mimeType": "audio/wav", "data": "UklGR"}}), GEM)
    assert resp.output == [TextPart("Here:"), TextPart("![image](data:image/png;base64,iVBORw0KGgo=)")]


def test_decode_an_answer_without_a_response_id_or_candidates() -> None:
    resp = decode({"modelVersion": MV}, GEM)
    assert len(resp.id) == 32 and resp.output == [] and resp.finish_reason == ir.STOP and resp.error is None


# A step as Gemini 3 answers it, and the exact parts it must get back on the next request.
STEP_PARTS: list[dict[str, Any]] = [{"text": "I should list it.", "thought": True},
              {"functionCall": {"id": "c-1", "name": "ls", "args": {"dir": "/"}}, "thoughtSignature": "SIG-STEP-1"},
              {"functionCall": {"id": "c-2", "name": "ls", "args": {"dir": "/tmp"}}}]
TEXT_PARTS: list[dict[str, Any]] = [{"text": "Plan.", "thought": True, "thoughtSignature": "SIG-THOUGHT"},
              {"text": "More thought.", "thought": True}, {"text": "", "thoughtSignature": "SIG-EMPTY"},
              {"text": "The answer", "thoughtSignature": "SIG-TEXT"}, {"text": " is 42."}]


def replayed(output: list[Any], model: str = "gemini-3-pro-preview", up: Upstream = GEM) -> list[dict[str, Any]]:
    """The model parts the next request sends after a client replays `output` as its assistant turn."""
    calls = [p for p in output if isinstance(p, ToolCallPart)]
    messages = [user("q"), Message("assistant", list(output)), *(tool(c.id, "ok") for c in calls)]
    body = encode(req(*messages, model=model), model, up)
    parts: list[dict[str, Any]] = body["contents"][1]["parts"]
    return parts


@pytest.mark.parametrize("parts", [STEP_PARTS, TEXT_PARTS], ids=["step", "text"])
def test_a_decoded_answer_goes_back_to_its_upstream_part_for_part(parts: list[dict[str, Any]]) -> None:
    resp = decode(answer(*parts), GEM)
    assert replayed(resp.output) == parts


@pytest.mark.parametrize("up", [upstream("vertex"), upstream("gem-eu")])
def test_a_decoded_answer_goes_to_another_upstream_without_its_signatures(up: Upstream) -> None:
    resp = decode(answer(*STEP_PARTS), GEM)
    assert replayed(resp.output, up=up) == [
        {"functionCall": {"id": "c-1", "name": "ls", "args": {"dir": "/"}}, "thoughtSignature": SKIP},
        {"functionCall": {"id": "c-2", "name": "ls", "args": {"dir": "/tmp"}}}]
    assert replayed(decode(answer(*TEXT_PARTS), GEM).output, up=up) == [{"text": "The answer"}, {"text": " is 42."}]


def test_a_decoded_answer_goes_to_another_model_of_the_same_upstream_without_its_signatures() -> None:
    resp = decode(answer(*STEP_PARTS), GEM)
    assert all_signatures(replayed(resp.output, model="gemini-2.5-pro")) == [SKIP]


# ================================================================ stream: SSEParser + GeminiStreamDecoder


def sse(*chunks: dict[str, Any] | str) -> bytes:
    """Google's framing: one `data:` line per GenerateContentResponse, CRLF, no [DONE]."""
    return b"".join(b"data: " + (c if isinstance(c, str) else json.dumps(c)).encode() + b"\r\n\r\n" for c in chunks)


def chunk(*parts: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None,
          first: bool = False, **cand_fields: Any) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, **cand_fields}
    if finish:
        cand["finishReason"] = finish
    doc: dict[str, Any] = {"candidates": [cand]}
    if usage is not None:
        doc["usageMetadata"] = usage
    if first:
        doc.update(modelVersion=MV, responseId="resp-s")
    return doc


def run_stream(raw: bytes, up: Upstream = GEM, splits: list[int] | None = None) -> list[Event]:
    """The decoder's events for `raw` fed in pieces cut at `splits` (Start's clock zeroed), well formed."""
    parser, decoder = SSEParser(), GeminiStreamDecoder(up)
    cuts = [0, *(splits or []), len(raw)]
    events: list[Event] = []
    for a, b in itertools.pairwise(cuts):
        for message in parser.feed(raw[a:b]):
            events += decoder.feed(message)
    events += decoder.close()
    check_well_formed(events)
    return [Start(e.id, e.model, 0, e.usage) if isinstance(e, Start) else e for e in events]


START = Start("resp-s", MV, 0)


def test_stream_text_and_finish() -> None:
    events = run_stream(sse(chunk({"text": "Hel"}, first=True), chunk({"text": "lo"}),
                            chunk({"text": "!"}, finish="STOP", usage={"promptTokenCount": 3,
                                                                       "candidatesTokenCount": 2})))
    assert events == [START, BlockStart(TextPart(""), 1), Delta("Hel", 1), Delta("lo", 1), Delta("!", 1),
                      UsageUpdate(Usage(input_tokens=3, output_tokens=2)), BlockStop(1), Finish(ir.STOP)]


def test_stream_signature_on_an_empty_part_after_thought_text_is_kept_in_the_reasoning_block() -> None:
    events = run_stream(sse(chunk({"text": "Let me", "thought": True}, first=True),
                            chunk({"text": " think.", "thought": True}),
                            chunk({"text": "", "thoughtSignature": "SIG-EMPTY"}),
                            chunk({"text": "42"}, finish="STOP")))
    assert events == [START, BlockStart(ReasoningPart(), 1), Delta("Let me", 1), Delta(" think.", 1),
                      Signature(env("SIG-EMPTY", "empty", ORIGIN), block=1), BlockStop(1),
                      BlockStart(TextPart(""), 2), Delta("42", 2), BlockStop(2), Finish(ir.STOP)]


def test_stream_signature_on_the_thought_part_closes_the_reasoning_block() -> None:
    events = run_stream(sse(chunk({"text": "plan", "thought": True, "thoughtSignature": "SIG-T"}, first=True),
                            chunk({"text": "second", "thought": True}), chunk(finish="STOP")))
    assert events == [START, BlockStart(ReasoningPart(), 1), Delta("plan", 1),
                      Signature(env("SIG-T", "thought", ORIGIN), block=1), BlockStop(1),
                      BlockStart(ReasoningPart(), 2), Delta("second", 2), BlockStop(2), Finish(ir.STOP)]


def test_stream_signature_on_an_empty_part_after_text_is_a_block_of_its_own() -> None:
    events = run_stream(sse(chunk({"text": "42"}, first=True), chunk({"text": "", "thoughtSignature": "SIG-END"},
                                                                     finish="STOP")))
    assert events == [START, BlockStart(TextPart(""), 1), Delta("42", 1), BlockStop(1),
                      BlockStart(ReasoningPart(), 2), Signature(env("SIG-END", "empty", ORIGIN), block=2), BlockStop(2),
                      Finish(ir.STOP)]


def test_stream_signature_on_a_call_closes_the_thought_streaming_before_it() -> None:
    """The thought text and the call's signature go back together, as from a whole answer."""
    events = run_stream(sse(chunk({"text": "why", "thought": True}, first=True),
                            chunk({"functionCall": {"id": "c-1", "name": "ls", "args": {"dir": "/"}},
                                   "thoughtSignature": "SIG-C"},
                                  {"functionCall": {"id": "c-2", "name": "cat", "args": {}}}, finish="STOP")))
    assert events == [START, BlockStart(ReasoningPart(), 1), Delta("why", 1),
                      Signature(env("SIG-C", "next", ORIGIN), block=1), BlockStop(1),
                      BlockStart(ToolCallPart("c-1", "ls"), 2), Delta('{"dir": "/"}', 2), BlockStop(2),
                      BlockStart(ToolCallPart("c-2", "cat"), 3), Delta("{}", 3), BlockStop(3), Finish(ir.TOOL_CALLS)]


def test_stream_signature_on_a_call_with_no_thought_before_it_is_a_block_of_its_own() -> None:
    events = run_stream(sse(chunk({"functionCall": {"id": "c-1", "name": "ls", "args": {}}, "thoughtSignature": "SIG-C"},
                                  first=True, finish="STOP")))
    assert events == [START, BlockStart(ReasoningPart(), 1), Signature(env("SIG-C", "next", ORIGIN), block=1),
                      BlockStop(1), BlockStart(ToolCallPart("c-1", "ls"), 2), Delta("{}", 2), BlockStop(2),
                      Finish(ir.TOOL_CALLS)]


def test_stream_signature_on_streaming_text_is_a_prev_block_after_the_text() -> None:
    events = run_stream(sse(chunk({"text": "The answer"}, first=True),
                            chunk({"text": " is 42.", "thoughtSignature": "SIG-TEXT"}), chunk({"text": " Bye."}),
                            chunk(finish="STOP")))
    assert events == [START, BlockStart(TextPart(""), 1), Delta("The answer", 1), Delta(" is 42.", 1), BlockStop(1),
                      BlockStart(ReasoningPart(), 2), Signature(env("SIG-TEXT", "prev", ORIGIN), block=2), BlockStop(2),
                      BlockStart(TextPart(""), 3), Delta(" Bye.", 3), BlockStop(3), Finish(ir.STOP)]


def test_stream_minted_call_ids_match_the_whole_answer() -> None:
    parts = [{"functionCall": {"name": "a", "args": {}}}, {"functionCall": {"name": "b", "args": {"x": 1}}}]
    events = run_stream(sse(chunk(parts[0], first=True), chunk(parts[1], finish="STOP")))
    whole = decode({**answer(*parts), "responseId": "resp-s"}, GEM)
    assert fold(events).output == whole.output


STREAM_FIXTURES = {
    "step": [chunk(STEP_PARTS[0], first=True), chunk(*STEP_PARTS[1:], finish="STOP")],
    "text": [chunk(TEXT_PARTS[0], first=True), *(chunk(p) for p in TEXT_PARTS[1:]), chunk(finish="STOP")],
}


@pytest.mark.parametrize("name", list(STREAM_FIXTURES))
def test_a_streamed_answer_goes_back_to_its_upstream_part_for_part(name: str) -> None:
    # The thought streamed before a signed call goes back with it, as from a whole answer.
    parts = STEP_PARTS if name == "step" else TEXT_PARTS
    folded = fold(run_stream(sse(*STREAM_FIXTURES[name])))
    assert replayed(folded.output) == parts
    assert all_signatures(replayed(folded.output, up=upstream("elsewhere"))) == ([SKIP] if name == "step" else [])


@pytest.mark.parametrize("name", list(STREAM_FIXTURES))
def test_a_stream_gives_the_same_events_at_every_byte_split(name: str) -> None:
    raw = sse(*STREAM_FIXTURES[name])
    whole = run_stream(raw)
    for cut in range(1, len(raw)):
        assert run_stream(raw, splits=[cut]) == whole, cut
    assert run_stream(raw, splits=list(range(1, len(raw)))) == whole


def test_stream_error_event_mid_stream_is_a_failure() -> None:
    error = {"error": {"code": 500, "message": "An internal error has occurred.", "status": "INTERNAL"}}
    parser, decoder = SSEParser(), GeminiStreamDecoder(GEM)
    events = [e for m in parser.feed(sse(chunk({"text": "par"}, first=True), error, chunk({"text": "ignored"},
                                                                                          finish="STOP")))
              for e in decoder.feed(m)]
    events += decoder.close()
    check_well_formed(events)
    assert events[1:] == [BlockStart(TextPart(""), 1), Delta("par", 1),
                          Failure(ErrorInfo("api_error", "An internal error has occurred.", 500, code="INTERNAL"))]


def test_stream_rate_limit_error_event_keeps_its_kind() -> None:
    events = run_stream(sse({"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}}))
    assert events == [Failure(ErrorInfo("rate_limit", "Quota exceeded", 429, code="RESOURCE_EXHAUSTED"))]


def test_stream_that_ends_without_a_finish_reason_is_a_failure() -> None:
    events = run_stream(sse(chunk({"text": "cut"}, first=True)))
    assert events == [START, BlockStart(TextPart(""), 1), Delta("cut", 1), BlockStop(1),
                      Failure(ErrorInfo("upstream_error", "upstream closed the stream before it finished", 502))]
    assert run_stream(b"") == [Failure(ErrorInfo("upstream_error", "upstream closed the stream without sending any "
                                                                   "event", 502))]


def test_stream_failed_finish_is_a_failure() -> None:
    events = run_stream(sse(chunk({"text": "x"}, first=True), chunk(finish="MALFORMED_FUNCTION_CALL")))
    assert isinstance(events[-1], Failure) and events[-1].error.code == "MALFORMED_FUNCTION_CALL"
    assert events[-1].error.status == 502


@pytest.mark.parametrize(("reason", "finish"), [("SAFETY", ir.CONTENT_FILTER), ("MAX_TOKENS", ir.LENGTH),
                                                ("RECITATION", ir.CONTENT_FILTER)])
def test_stream_finish_reasons(reason: str, finish: str) -> None:
    assert run_stream(sse(chunk({"text": "x"}, first=True), chunk(finish=reason)))[-1] == Finish(finish)


def test_stream_blocked_prompt_is_a_400_failure() -> None:
    events = run_stream(sse({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "modelVersion": MV,
                             "responseId": "resp-s"}))
    assert events[0] == START and isinstance(events[1], Failure) and len(events) == 2
    assert (events[1].error.status, events[1].error.code) == (400, "PROHIBITED_CONTENT")


def test_stream_usage_updates_last_wins() -> None:
    events = run_stream(sse(
        chunk({"text": "a"}, first=True, usage={"promptTokenCount": 10, "totalTokenCount": 10}),
        chunk({"text": "b"}, usage={"promptTokenCount": 10, "candidatesTokenCount": 1, "thoughtsTokenCount": 4}),
        chunk(finish="STOP", usage={"promptTokenCount": 10, "cachedContentTokenCount": 8, "candidatesTokenCount": 2,
                                    "thoughtsTokenCount": 4, "totalTokenCount": 16})))
    updates = [e.usage for e in events if isinstance(e, UsageUpdate)]
    assert updates == [Usage(input_tokens=10), Usage(input_tokens=10, output_tokens=5, reasoning_tokens=4),
                       Usage(input_tokens=10, output_tokens=6, cache_read_tokens=8, reasoning_tokens=4)]
    assert fold(events).usage == updates[-1]


def test_stream_citations_and_an_image() -> None:
    events = run_stream(sse(chunk({"text": "Quoted."}, first=True,
                                  citationMetadata={"citationSources": [{"startIndex": 0, "endIndex": 7,
                                                                         "uri": "https://example.com"}]}),
                            chunk({"inlineData": {"mimeType": "image/jpeg", "data": "/9j/"}}, finish="STOP")))
    cite = Citation(kind="url", url="https://example.com", start=0, end=7, origin="gemini",
                    origin_type="citationSource")
    assert events == [START, BlockStart(TextPart(""), 1), Delta("Quoted.", 1), Cite(cite, 1),
                      Delta("![image](data:image/jpeg;base64,/9j/)", 1), BlockStop(1), Finish(ir.STOP)]


def test_stream_origin_names_the_upstream_and_the_answering_model() -> None:
    events = run_stream(sse(chunk({"text": "", "thoughtSignature": "S"}, first=True), chunk(finish="STOP")),
                        up=upstream("vertex-eu"))
    signature = next(e.signature for e in events if isinstance(e, Signature))
    assert gemini_from_envelope(signature) == ("S", f"vertex-eu/{MV}", "empty")


def test_stream_malformed_event_is_a_failure() -> None:
    events = run_stream(sse(chunk({"text": "a"}, first=True), '{"candidates": [', chunk(finish="STOP")))
    assert events[-1] == Failure(ErrorInfo("upstream_error", "upstream sent a malformed JSON event in its stream", 502))
    assert sum(isinstance(e, Failure | Finish) for e in events) == 1


# ================================================================ spelling.camel_keys


def test_camel_keys_converts_field_names_at_every_depth() -> None:
    body = {"system_instruction": {"parts": [{"text": "x"}]},
            "generation_config": {"max_output_tokens": 5, "thinking_config": {"thinking_budget": 0,
                                                                              "include_thoughts": True}},
            "contents": [{"role": "user", "parts": [{"inline_data": {"mime_type": "image/png", "data": "AA"}}]}],
            "tool_config": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["my_tool"]}}}
    assert camel_keys(body) == {
        "systemInstruction": {"parts": [{"text": "x"}]},
        "generationConfig": {"maxOutputTokens": 5, "thinkingConfig": {"thinkingBudget": 0, "includeThoughts": True}},
        "contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA"}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["my_tool"]}}}


def test_camel_keys_leaves_arguments_results_and_schemas_alone() -> None:
    schema = {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}
    body = {"contents": [{"role": "model", "parts": [
                {"function_call": {"name": "read_file", "args": {"file_path": "/a", "max_lines": 3}},
                 "thought_signature": "S"}]},
             {"role": "user", "parts": [{"function_response": {"name": "read_file",
                                                               "response": {"file_contents": "x", "line_count": 1}}}]}],
            "tools": [{"function_declarations": [{"name": "read_file", "parameters_json_schema": schema},
                                                 {"name": "old", "parameters": schema}]}],
            "generation_config": {"response_json_schema": schema, "response_schema": schema},
            "labels": {"team_name": "a"}}
    assert camel_keys(body) == {
        "contents": [{"role": "model", "parts": [
            {"functionCall": {"name": "read_file", "args": {"file_path": "/a", "max_lines": 3}},
             "thoughtSignature": "S"}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "read_file",
                                                             "response": {"file_contents": "x", "line_count": 1}}}]}],
        "tools": [{"functionDeclarations": [{"name": "read_file", "parametersJsonSchema": schema},
                                            {"name": "old", "parameters": schema}]}],
        "generationConfig": {"responseJsonSchema": schema, "responseSchema": schema},
        "labels": {"team_name": "a"}}


def test_camel_keys_keeps_camel_case_and_does_not_change_its_input() -> None:
    body = {"generationConfig": {"topK": 3}, "safety_settings": [{"category": "HARM_CATEGORY_HATE_SPEECH"}]}
    before = json.dumps(body)
    assert camel_keys(body) == {"generationConfig": {"topK": 3}, "safetySettings": [
        {"category": "HARM_CATEGORY_HATE_SPEECH"}]}  # values are not names: left as they are
    assert json.dumps(body) == before


# ================================================================ catalog


def models(*ids: str) -> list[Any]:
    return [SimpleNamespace(id=i) for i in ids]


def names(page: dict[str, Any]) -> list[str]:
    return [m["name"] for m in page["models"]]


def test_listing_pages_by_page_size_and_token() -> None:
    catalogue = models("a", "b", "c", "d", "e")
    first = catalog.listing(catalogue, None, {"pageSize": "2"})
    assert names(first) == ["models/a", "models/b"] and first["nextPageToken"] == "2"
    second = catalog.listing(catalogue, None, {"pageSize": "2", "pageToken": first["nextPageToken"]})
    assert names(second) == ["models/c", "models/d"] and second["nextPageToken"] == "4"
    last = catalog.listing(catalogue, None, {"pageSize": "2", "pageToken": "4"})
    assert names(last) == ["models/e"] and "nextPageToken" not in last
    assert catalog.listing(catalogue, None, {"pageToken": "9"}) == {"models": []}


def test_listing_default_and_largest_page() -> None:
    catalogue = models(*(f"m{i}" for i in range(1200)))
    default = catalog.listing(catalogue, None, {})
    assert len(default["models"]) == 50 and default["nextPageToken"] == "50"
    largest = catalog.listing(catalogue, None, {"pageSize": "5000"})
    assert len(largest["models"]) == 1000 and largest["nextPageToken"] == "1000"
    # proto3: a pageSize of 0 is one not given, the default page (the Gemini API's reference: "If
    # unspecified, 50 models will be returned")
    assert len(catalog.listing(catalogue, None, {"pageSize": "0"})["models"]) == 50


def test_listing_entry_shape() -> None:
    assert catalog.listing(models("gemini-x"), None, {}) == {"models": [{
        "name": "models/gemini-x", "baseModelId": "gemini-x", "version": "001", "displayName": "gemini-x",
        "description": "gemini-x, served by llm-proxy", "inputTokenLimit": 1_048_576, "outputTokenLimit": 65_536,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"], "thinking": True,
        "temperature": 1, "maxTemperature": 2, "topP": 0.95, "topK": 64}]}


@pytest.mark.parametrize(("query", "field"), [({"pageSize": "ten"}, "pageSize"), ({"pageSize": "-1"}, "pageSize"),
                                              ({"pageToken": "abc"}, "pageToken")])
def test_listing_bad_paging_is_a_400_naming_the_field(query: dict[str, str], field: str) -> None:
    with pytest.raises(ProxyError) as caught:
        catalog.listing(models("a"), None, query)
    info = caught.value.info
    assert (info.status, info.kind, info.param) == (400, "invalid_request", field)
    assert info.message == f"{field}: must be a whole number (got {query[field]!r})."


def test_one_model_by_name_with_or_without_the_prefix_and_404_for_an_unknown_one() -> None:
    catalogue = models("gemini-x", "gemini-y")
    assert catalog.listing(catalogue, "gemini-y", {}) == catalog.entry("gemini-y")
    assert catalog.listing(catalogue, "models/gemini-y", {})["name"] == "models/gemini-y"
    with pytest.raises(ProxyError) as caught:
        catalog.listing(catalogue, "models/gemini-z", {})
    assert (caught.value.info.status, caught.value.info.kind) == (404, "not_found")
    assert caught.value.info.message == ("models/gemini-z is not found on this proxy; GET /v1beta/models lists "
                                         "the models.")


def test_upstream_model_ids() -> None:
    doc = {"models": [{"name": "models/gemini-2.5-flash", "displayName": "Flash"}, {"name": "tunedModels/t1"},
                      {"displayName": "no name"}, "junk"], "nextPageToken": "x"}
    assert catalog.upstream_model_ids(doc) == ["gemini-2.5-flash", "tunedModels/t1"]
    assert catalog.upstream_model_ids({"models": []}) == []
    assert catalog.upstream_model_ids({"data": [{"id": "gpt"}]}) is None
    assert catalog.upstream_model_ids([{"name": "models/x"}]) is None
