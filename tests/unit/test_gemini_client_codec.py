"""The Gemini client codec: request decoding (every part type and config field, 400s naming the
field), whole and streamed answers, and the thought-signature tokens — checked, where it matters,
through google-genai's own code (its SSE parser, its response types, its chat history), with its
HTTP transport replaced by the bytes the encoder wrote."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import _api_client, errors, types

from proxy.errors import ProxyError
from proxy.ir import response as ir
from proxy.ir.events import BlockStart, BlockStop, Cite, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.reasoning import gemini_from_envelope
from proxy.ir.request import (
    AudioPart,
    Citation,
    FilePart,
    ImagePart,
    ReasoningPart,
    RefusalPart,
    ResponseFormat,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from proxy.ir.response import ErrorInfo, Response, Usage
from proxy.protocols.gemini import carrier
from proxy.protocols.gemini.request import count_tokens_request, decode, include_thoughts, json_schema
from proxy.protocols.gemini.response import encode
from proxy.protocols.gemini.stream_encode import GeminiStreamEncoder
from proxy.protocols.gemini.vocabulary import SKIP_SIGNATURE, URL_KEY

ANTHROPIC_SIG = "EqQBCkYIBxgCKkB" + "x" * 40  # shaped like one; opaque either way


def body(*contents: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "m", "contents": list(contents), **fields}


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


def model(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "model", "parts": list(parts)}


# ---------------------------------------------------------------- the SDK, with its transport replaced


class FakeSDK:
    """A google-genai client whose HTTP layer returns the bytes given, and records what it sent."""

    def __init__(self) -> None:
        self.client = genai.Client(api_key="k")
        self.sent: list[dict[str, Any]] = []
        self.answers: list[Any] = []
        self.client._api_client._request = self._request  # type: ignore[method-assign]

    def _request(self, http_request: Any, http_options: Any = None, stream: bool = False) -> Any:
        self.sent.append(json.loads(http_request.data) if isinstance(http_request.data, bytes | str)
                         else http_request.data)
        answer = self.answers.pop(0)
        if stream:
            chunks = answer if isinstance(answer, list) else [answer]
            return _api_client.HttpResponse({}, httpx.Response(200, content=iter(chunks)))
        return _api_client.HttpResponse({}, [json.dumps(answer)])


def sdk_stream(frames: Iterable[bytes], sdk: FakeSDK | None = None) -> list[types.GenerateContentResponse]:
    sdk = sdk or FakeSDK()
    sdk.answers.append(list(frames))
    return list(sdk.client.models.generate_content_stream(model="m", contents="hi"))


def sdk_whole(doc: dict[str, Any]) -> types.GenerateContentResponse:
    sdk = FakeSDK()
    sdk.answers.append(doc)
    return sdk.client.models.generate_content(model="m", contents="hi")


# ---------------------------------------------------------------- decoding requests


def test_roles_system_and_text() -> None:
    req = decode(body(user({"text": "hi"}), model({"text": "hello"}), {"parts": [{"text": "no role"}]},
                      systemInstruction={"parts": [{"text": "be brief"}, {"text": " always"}]}))
    assert [(m.role, [p.text for p in m.parts]) for m in req.messages] == [  # type: ignore[union-attr]
        ("system", ["be brief", " always"]), ("user", ["hi"]), ("assistant", ["hello"]), ("user", ["no role"])]
    assert req.model == "m" and not req.stream
    assert decode(body(user({"text": "x"}), systemInstruction="plain")).messages[0].parts == [TextPart("plain")]


def test_stream_flag_from_the_url() -> None:
    req = decode(body(user({"text": "x"}), **{URL_KEY: {"stream": True, "sse": True}}))
    assert req.stream and req.include_usage and URL_KEY not in req.extras


def test_media_parts() -> None:
    req = decode(body(user(
        {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
        {"inlineData": {"mimeType": "audio/wav", "data": "UklG"}},
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://x/a.jpg"}},
        {"fileData": {"mimeType": "application/pdf", "fileUri": "https://x/a.pdf"}},
    )))
    assert req.messages[0].parts == [
        ImagePart(data="iVBO", media_type="image/png"), AudioPart(data="UklG", format="wav"),
        FilePart(data="JVBE", media_type="application/pdf"), ImagePart(url="https://x/a.jpg", media_type="image/jpeg"),
        FilePart(url="https://x/a.pdf", media_type="application/pdf")]


def test_code_execution_parts_become_text() -> None:
    req = decode(body(user({"text": "run"}), model(
        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1\n"}})))
    assert [p.text for p in req.messages[1].parts] == [  # type: ignore[union-attr]
        "```python\nprint(1)\n```", "Code execution result (OUTCOME_OK):\n1\n"]


def test_calls_with_ids_and_their_responses() -> None:
    req = decode(body(
        user({"text": "go"}),
        model({"functionCall": {"name": "ls", "args": {"dir": "/"}, "id": "abc"}}),
        user({"functionResponse": {"name": "ls", "id": "abc", "response": {"output": "a b"}}}, {"text": "and?"})))
    call = req.messages[1].parts[0]
    assert call == ToolCallPart(id="abc", name="ls", arguments='{"dir": "/"}')
    assert req.messages[2].role == "tool"
    assert req.messages[2].parts == [ToolResultPart("abc", [TextPart('{"output": "a b"}')])]
    assert req.messages[3].role == "user" and req.messages[3].parts == [TextPart("and?")]


def test_calls_without_ids_match_by_name_and_order_with_stable_minted_ids() -> None:
    history = body(
        user({"text": "go"}),
        model({"functionCall": {"name": "read", "args": {"f": "a"}}}, {"functionCall": {"name": "read", "args": {"f": "b"}}},
              {"functionCall": {"name": "ls"}}),
        user({"functionResponse": {"name": "ls", "response": {"output": "x"}}},
             {"functionResponse": {"name": "read", "response": {"output": "A"}}},
             {"functionResponse": {"name": "read", "response": {"error": "no b"}}}))
    req = decode(history)
    calls = [p for p in req.messages[1].parts if isinstance(p, ToolCallPart)]
    assert all(c.id.startswith("call_") and len(c.id) == 29 for c in calls) and len({c.id for c in calls}) == 3
    results = [p for p in req.messages[2].parts if isinstance(p, ToolResultPart)]
    # paired in call order; the second "read" answer goes to the second "read" call
    assert [(r.call_id, r.text(), r.is_error) for r in results] == [
        (calls[0].id, '{"output": "A"}', False), (calls[1].id, '{"error": "no b"}', True),
        (calls[2].id, '{"output": "x"}', False)]
    again = decode(history)
    assert [p.id for p in again.messages[1].parts if isinstance(p, ToolCallPart)] == [c.id for c in calls]


def test_consecutive_model_contents_are_one_turn() -> None:
    req = decode(body(user({"text": "q"}), model({"text": "Hel"}), model({"text": "lo"}), model({"text": ""})))
    assert len(req.messages) == 2 and req.messages[1].parts == [TextPart("Hel"), TextPart("lo")]


def test_thought_parts_merge_into_reasoning() -> None:
    req = decode(body(user({"text": "q"}), model({"text": "think ", "thought": True}, {"text": "more", "thought": True},
                                                  {"text": "answer"})))
    assert req.messages[1].parts == [ReasoningPart(text="think more"), TextPart("answer")]


def test_google_signatures_are_wrapped_with_their_placement() -> None:
    req = decode(body(
        user({"text": "q"}),
        model({"text": "plan", "thought": True}, {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "R09PRw=="}),
        user({"functionResponse": {"name": "f", "response": {}}}),
        model({"text": "t2", "thought": True}, {"text": "", "thoughtSignature": "RU1QVFk="}, {"text": "done"}),
        user({"text": "q2"}),
        model({"text": "t3", "thought": True, "thoughtSignature": "VEhPVUdIVA=="}, {"text": "ok"})))
    first, second, third = req.messages[1].parts, req.messages[3].parts, req.messages[5].parts
    assert isinstance(first[0], ReasoningPart) and first[0].text == "plan"
    assert gemini_from_envelope(first[0].signature) == ("R09PRw==", "", "next")
    assert isinstance(first[1], ToolCallPart)
    assert isinstance(second[0], ReasoningPart) and second[0].text == "t2"
    assert gemini_from_envelope(second[0].signature) == ("RU1QVFk=", "", "empty")
    assert second[1:] == [TextPart("done")]
    assert gemini_from_envelope(third[0].signature) == ("VEhPVUdIVA==", "", "thought")  # type: ignore[union-attr]
    assert third[0].text == "t3" and third[1:] == [TextPart("ok")]  # type: ignore[union-attr]


def test_skip_sentinel_is_dropped() -> None:
    req = decode(body(user({"text": "q"}), model({"functionCall": {"name": "f"}, "thoughtSignature": SKIP_SIGNATURE})))
    assert [type(p) for p in req.messages[1].parts] == [ToolCallPart]


def test_tools_both_schema_fields() -> None:
    req = decode(body(user({"text": "q"}), tools=[
        {"functionDeclarations": [
            {"name": "a", "description": "A", "parametersJsonSchema": {
                "type": "object", "properties": {"x": {"type": ["string", "null"]}}, "additionalProperties": False}},
            {"name": "b", "parameters": {
                "type": "OBJECT", "propertyOrdering": ["n", "tags"], "required": ["n"], "properties": {
                    "n": {"type": "INTEGER", "nullable": True},
                    "tags": {"type": "ARRAY", "minItems": "1", "items": {"type": "STRING", "enum": ["p", "q"]}},
                    "any": {"anyOf": [{"type": "NUMBER"}, {"type": "BOOLEAN"}]}}}},
            {"name": "c"}]},
        {"googleSearch": {}}]))
    a, b, c = req.tools
    assert a.parameters == {"type": "object", "properties": {"x": {"type": ["string", "null"]}},
                            "additionalProperties": False} and a.description == "A"
    assert b.parameters == {"type": "object", "required": ["n"], "properties": {
        "n": {"type": ["integer", "null"]}, "tags": {"type": "array", "minItems": 1, "items": {"type": "string",
                                                                                           "enum": ["p", "q"]}},
        "any": {"anyOf": [{"type": "number"}, {"type": "boolean"}]}}}
    assert c.parameters == {"type": "object", "properties": {}}
    assert req.extras["tools"] == [{"googleSearch": {}}]


@pytest.mark.parametrize(("config", "choice"), [
    ({"mode": "AUTO"}, ToolChoice("auto")),
    ({"mode": "auto", "allowedFunctionNames": ["a", "b"]}, ToolChoice("auto", allowed=["a", "b"])),
    ({"mode": "ANY"}, ToolChoice("required")),
    ({"mode": "ANY", "allowedFunctionNames": ["a"]}, ToolChoice("tool", name="a")),
    ({"mode": "ANY", "allowedFunctionNames": ["a", "b"]}, ToolChoice("required", allowed=["a", "b"])),
    ({"mode": "NONE"}, ToolChoice("none")),
    ({"mode": "VALIDATED"}, ToolChoice("auto")),
])
def test_function_calling_config(config: dict[str, Any], choice: ToolChoice) -> None:
    req = decode(body(user({"text": "q"}), toolConfig={"functionCallingConfig": config}))
    assert req.tool_choice == choice


def test_generation_config_and_extras() -> None:
    req = decode(body(user({"text": "q"}), safetySettings=[{"category": "HARM_CATEGORY_HATE_SPEECH",
                                                             "threshold": "BLOCK_NONE"}],
                      cachedContent="cachedContents/1", generationConfig={
                          "temperature": 0.2, "topP": 0.9, "topK": 40, "maxOutputTokens": 100, "stopSequences": ["END"],
                          "candidateCount": 1, "presencePenalty": 0.5, "frequencyPenalty": 0.25, "seed": 7,
                          "responseModalities": ["TEXT"]}))
    assert (req.temperature, req.top_p, req.top_k, req.max_tokens, req.stop) == (0.2, 0.9, 40, 100, ["END"])
    assert (req.presence_penalty, req.frequency_penalty, req.seed) == (0.5, 0.25, 7)
    assert req.extras == {"safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}],
                          "cachedContent": "cachedContents/1", "generationConfig": {"responseModalities": ["TEXT"]}}


@pytest.mark.parametrize(("config", "expected"), [
    ({"responseMimeType": "application/json"}, ResponseFormat("json_object")),
    ({"responseMimeType": "application/json", "responseJsonSchema": {"type": "object", "properties": {}}},
     ResponseFormat("json_schema", name="response", schema={"type": "object", "properties": {}})),
    # gemini-cli's routing request: OpenAPI's upper-case type names
    ({"responseMimeType": "application/json", "responseSchema": {
        "type": "OBJECT", "properties": {"model_choice": {"type": "STRING", "enum": ["flash", "pro"]}}}},
     ResponseFormat("json_schema", name="response", schema={
         "type": "object", "properties": {"model_choice": {"type": "string", "enum": ["flash", "pro"]}}})),
    ({"responseMimeType": "application/json", "responseJsonSchema": {"type": "OBJECT"}},
     ResponseFormat("json_schema", name="response", schema={"type": "object"})),
    ({"responseMimeType": "text/plain"}, None),
])
def test_response_formats(config: dict[str, Any], expected: ResponseFormat | None) -> None:
    assert decode(body(user({"text": "q"}), generationConfig=config)).response_format == expected


@pytest.mark.parametrize(("thinking", "effort", "budget", "enabled", "summary"), [
    ({"thinkingBudget": 0}, None, None, False, None),
    ({"thinkingBudget": -1}, None, None, True, None),
    ({"thinkingBudget": 4096}, None, 4096, True, None),
    ({"thinkingLevel": "HIGH"}, "high", None, True, None),
    ({"thinkingLevel": "low", "includeThoughts": True}, "low", None, True, "auto"),
    ({"includeThoughts": True}, None, None, True, "auto"),
])
def test_thinking_config(thinking: dict[str, Any], effort: str | None, budget: int | None, enabled: bool,
                         summary: str | None) -> None:
    b = body(user({"text": "q"}), generationConfig={"thinkingConfig": thinking})
    r = decode(b).reasoning
    assert r is not None and (r.effort, r.budget_tokens, r.enabled, r.summary) == (effort, budget, enabled, summary)
    assert include_thoughts(b) is bool(thinking.get("includeThoughts"))


def test_no_thinking_config_no_reasoning() -> None:
    assert decode(body(user({"text": "q"}), generationConfig={"thinkingConfig": {}})).reasoning is None


@pytest.mark.parametrize(("bad", "message"), [
    ({"model": "m"}, "contents: is required"),
    ({"model": "m", "contents": []}, "contents: must not be empty"),
    (body({"role": "user"}), "contents[0].parts: is required"),
    (body(user({"text": "a"}), {"role": "model", "parts": []}), "contents[1].parts: must not be empty"),
    (body(user({"text": "a"}), user({"toolCall": {"id": "x"}})), "contents[1].parts[0]: must have one of text"),
    (body(user({})), "contents[0].parts[0]: must have one of"),
    (body(user({"text": "a", "inlineData": {"mimeType": "image/png", "data": "x"}})),
     "contents[0].parts[0]: must have only one of"),
    (body(user("text")), "contents[0].parts[0]: must be an object"),  # type: ignore[arg-type]
    (body({"role": "system", "parts": [{"text": "a"}]}), "contents[0].role: must be one of 'user', 'model'"),
    (body({"role": "assistant", "parts": [{"text": "a"}]}), "contents[0].role"),
    (body(user({"inlineData": {"data": "x"}})), "contents[0].parts[0].inlineData.mimeType: is required"),
    (body(user({"functionCall": {"name": "f"}})), "contents[0].parts[0].functionCall: only a model turn"),
    (body(model({"functionResponse": {"name": "f"}})), "contents[0].parts[0].functionResponse: belongs in a user"),
    (body(model({"functionCall": {"args": {}}})), "contents[0].parts[0].functionCall.name: is required"),
    (body(user({"text": 5})), "contents[0].parts[0].text: must be a string"),
    (body(user({"text": "a"}), generationConfig={"candidateCount": 2}), "generationConfig.candidateCount"),
    (body(user({"text": "a"}), generationConfig="hot"), "generationConfig: must be an object"),
    (body(user({"text": "a"}), generationConfig={"temperature": "hot"}), "generationConfig.temperature"),
    (body(user({"text": "a"}), generationConfig={"maxOutputTokens": 0}), "generationConfig.maxOutputTokens"),
    (body(user({"text": "a"}), generationConfig={"stopSequences": [1]}), "generationConfig.stopSequences[0]"),
    (body(user({"text": "a"}), generationConfig={"thinkingConfig": {"thinkingLevel": "max"}}),
     "generationConfig.thinkingConfig.thinkingLevel"),
    (body(user({"text": "a"}), toolConfig={"functionCallingConfig": {"mode": "SOMETIMES"}}),
     "toolConfig.functionCallingConfig.mode"),
    (body(user({"text": "a"}), tools={"functionDeclarations": []}), "tools: must be an array"),
    (body(user({"text": "a"}), tools=[{"functionDeclarations": [{"description": "x"}]}]),
     "tools[0].functionDeclarations[0].name: is required"),
    (body(user({"text": "a"}), tools=[{"functionDeclarations": [{"name": "f", "parameters": {},
                                                                 "parametersJsonSchema": {}}]}]),
     "tools[0].functionDeclarations[0].parametersJsonSchema: cannot be given together with parameters"),
])
def test_bad_input_is_a_400_naming_the_field(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ProxyError) as caught:
        decode(bad)
    assert caught.value.info.status == 400 and caught.value.info.message.startswith(message), caught.value.info.message


def test_count_tokens_bodies() -> None:
    contents = [user({"text": "hi"})]
    assert count_tokens_request({"model": "m", "contents": contents}).messages[0].parts == [TextPart("hi")]
    inner = count_tokens_request({"model": "m", "generateContentRequest": {
        "model": "models/m", "contents": contents, "systemInstruction": {"parts": [{"text": "s"}]}}})
    assert inner.model == "m" and [m.role for m in inner.messages] == ["system", "user"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"model": "m", "contents": contents, "generateContentRequest": {"contents": contents}},
         "generateContentRequest: give either contents or generateContentRequest, not both"),
        ({"model": "m"}, "contents: is required"),
        ({"model": "m", "generateContentRequest": {"contents": [{"role": "user", "parts": []}]}},
         "generateContentRequest.contents[0].parts: must not be empty"),
    ]
    for bad, message in cases:
        with pytest.raises(ProxyError) as caught:
            count_tokens_request(bad)
        assert caught.value.info.status == 400 and caught.value.info.message.startswith(message)


def test_openapi_nullable_any_of_and_nested_keywords() -> None:
    assert json_schema({"anyOf": [{"type": "STRING"}], "nullable": True}) == {
        "anyOf": [{"type": "string"}, {"type": "null"}]}
    assert json_schema({"type": "ARRAY", "contains": {"type": "INTEGER"}, "maxItems": "3"}) == {
        "type": "array", "contains": {"type": "integer"}, "maxItems": 3}


def test_json_schema_leaves_json_schema_alone() -> None:
    schema = {"type": "object", "properties": {"nullable": {"type": "boolean"}}, "required": ["nullable"]}
    assert json_schema(schema, openapi=False) == schema


# ---------------------------------------------------------------- whole answers


def answer(*output: Any, reason: str = ir.STOP, usage: Usage | None = None) -> Response:
    return Response(id="resp1", model="up", created=0, output=list(output), finish_reason=reason,
                    usage=usage or Usage(input_tokens=10, output_tokens=7, reasoning_tokens=3, cache_read_tokens=4))


def test_whole_answer_shape() -> None:
    doc = encode(answer(ReasoningPart(text="hmm", signature=ANTHROPIC_SIG), TextPart("Let me look."),
                        ToolCallPart(id="toolu_1", name="ls", arguments='{"dir": "/"}'),
                        ToolCallPart(id="toolu_2", name="bad", arguments='{"dir": '), reason=ir.TOOL_CALLS), "gm-1")
    cand = doc["candidates"][0]
    parts = cand["content"]["parts"]
    assert parts[0] == {"text": "hmm", "thought": True}
    assert parts[1]["text"] == "Let me look." and carrier.is_token(parts[1]["thoughtSignature"])
    assert parts[2:] == [{"functionCall": {"name": "ls", "args": {"dir": "/"}, "id": "toolu_1"}},
                         {"functionCall": {"name": "bad", "args": {}, "id": "toolu_2"}}]
    assert cand["finishReason"] == "STOP" and cand["index"] == 0 and cand["content"]["role"] == "model"
    assert doc["usageMetadata"] == {"promptTokenCount": 10, "candidatesTokenCount": 4, "totalTokenCount": 17,
                                    "cachedContentTokenCount": 4, "thoughtsTokenCount": 3}
    assert doc["modelVersion"] == "gm-1" and doc["responseId"] == "resp1"
    got = sdk_whole(doc)
    assert got.text == "Let me look." and [c.name for c in got.function_calls or []] == ["ls", "bad"]
    assert got.usage_metadata and got.usage_metadata.thoughts_token_count == 3


@pytest.mark.parametrize(("reason", "gemini"), [(ir.LENGTH, "MAX_TOKENS"), (ir.CONTENT_FILTER, "SAFETY"),
                                                (ir.STOP_SEQUENCE, "STOP"), (ir.PAUSE, "STOP")])
def test_finish_reasons(reason: str, gemini: str) -> None:
    assert encode(answer(TextPart("x"), reason=reason), "m")["candidates"][0]["finishReason"] == gemini


def test_content_filter_with_nothing_said_has_no_content() -> None:
    cand = encode(answer(reason=ir.CONTENT_FILTER), "m")["candidates"][0]
    assert cand == {"finishReason": "SAFETY", "index": 0}
    assert not sdk_whole(encode(answer(reason=ir.CONTENT_FILTER), "m")).text


def test_refusal_and_citations() -> None:
    cite = Citation(kind="url", url="https://e.org", title="E", start=2, end=5)
    doc = encode(answer(TextPart("héllo", citations=[cite]), TextPart("ab", citations=[
        Citation(kind="url", url="https://f.org", start=0, end=2)]), RefusalPart("no")), "m")
    cand = doc["candidates"][0]
    assert cand["content"]["parts"] == [{"text": "héllo"}, {"text": "ab"}, {"text": "no"}]
    # byte offsets into the candidate's text: "é" is two bytes
    assert cand["citationMetadata"]["citations"] == [
        {"startIndex": 3, "endIndex": 6, "uri": "https://e.org", "title": "E"},
        {"startIndex": 6, "endIndex": 8, "uri": "https://f.org"}]
    got = sdk_whole(doc)
    assert got.candidates and got.candidates[0].citation_metadata


def test_thoughts_left_out_when_not_asked_but_tokens_kept() -> None:
    parts = encode(answer(ReasoningPart(text="hmm", signature=ANTHROPIC_SIG), TextPart("hi")), "m",
                   include_thoughts=False)["candidates"][0]["content"]["parts"]
    assert len(parts) == 1 and parts[0]["text"] == "hi"
    assert carrier.unpack(parts[0]["thoughtSignature"]) == [ReasoningPart(text="hmm", signature=ANTHROPIC_SIG)]


def test_reasoning_at_the_end_gets_an_empty_carrier_part() -> None:
    parts = encode(answer(TextPart("a"), ReasoningPart(text="t", encrypted="enc", id="rs_1")), "m")[
        "candidates"][0]["content"]["parts"]
    assert parts[:2] == [{"text": "a"}, {"text": "t", "thought": True}]
    assert parts[2]["text"] == "" and carrier.unpack(parts[2]["thoughtSignature"]) == [
        ReasoningPart(text="t", encrypted="enc", id="rs_1")]


# ---------------------------------------------------------------- the token, through the SDK and back


def sdk_history_round_trip(doc: dict[str, Any], strip_thoughts: bool = False) -> list[Any]:
    """The answer through google-genai's chat (its history), then the SDK's next request decoded."""
    sdk = FakeSDK()
    sdk.answers += [doc, encode(answer(TextPart("fine")), "m")]
    chat = sdk.client.chats.create(model="m")
    chat.send_message("first")
    if strip_thoughts:  # as gemini-cli keeps its history: no `thought: true` part
        for content in chat._curated_history:
            content.parts = [p for p in content.parts or [] if not p.thought]
    chat.send_message("second")
    sent = sdk.sent[1]
    assert all(isinstance(p.get("thoughtSignature", ""), str) for c in sent["contents"] for p in c["parts"])
    return decode({"model": "m", **sent}).messages[1].parts


@pytest.mark.parametrize("strip_thoughts", [False, True])
@pytest.mark.parametrize("reasoning", [
    ReasoningPart(text="I should list.", signature=ANTHROPIC_SIG),
    ReasoningPart(redacted="cmVkYWN0ZWQ="),
    ReasoningPart(text="summary", encrypted="gAAAAB-opaque", id="rs_9"),
    ReasoningPart(text="plain reasoning from a Chat upstream"),
])
def test_reasoning_round_trips_through_the_sdk(reasoning: ReasoningPart, strip_thoughts: bool) -> None:
    doc = encode(answer(reasoning, ToolCallPart(id="toolu_1", name="ls", arguments="{}")), "m")
    parts = sdk_history_round_trip(doc, strip_thoughts)
    assert parts == [reasoning, ToolCallPart(id="toolu_1", name="ls", arguments="{}")]


def test_two_reasoning_parts_before_one_answer_travel_together() -> None:
    first, second = ReasoningPart(text="a", signature="S1"), ReasoningPart(text="b", signature="S2")
    parts = sdk_history_round_trip(encode(answer(first, second, TextPart("x")), "m"), strip_thoughts=True)
    assert parts == [first, second, TextPart("x")]


def test_token_is_canonical_base64_the_sdk_gives_back_unchanged() -> None:
    token = carrier.pack([ReasoningPart(text="ü", signature=ANTHROPIC_SIG)])
    part = types.Part.model_validate({"text": "x", "thoughtSignature": token})
    assert part.model_dump(mode="json", by_alias=True, exclude_none=True)["thoughtSignature"] == token
    assert base64.b64encode(base64.b64decode(token)).decode() == token
    assert not carrier.is_token("R09PRw==") and carrier.unpack("not base64!") is None


# ---------------------------------------------------------------- streams


def run(encoder: GeminiStreamEncoder, events: Iterable[Event]) -> list[bytes]:
    return [frame for ev in events for frame in encoder.encode(ev)]


def story() -> list[Event]:
    return [
        Start(id="r1", model="up", created=0, usage=Usage(input_tokens=12)),
        BlockStart(ReasoningPart(), 0), Delta("Let me ", 0), Delta("think.", 0), Signature(ANTHROPIC_SIG, block=0),
        BlockStop(0),
        BlockStart(TextPart(""), 1), Delta("Listing", 1), Delta(" now\u2028.", 1),
        Cite(Citation(kind="url", url="https://e.org", start=0, end=7), 1), BlockStop(1),
        BlockStart(ToolCallPart(id="toolu_1", name="ls", arguments=""), 2), Delta('{"dir"', 2), Delta(': "/"}', 2),
        BlockStop(2),
        UsageUpdate(Usage(input_tokens=12, output_tokens=9, reasoning_tokens=2)), Finish(ir.TOOL_CALLS),
    ]


def sse_docs(frames: list[bytes]) -> list[dict[str, Any]]:
    data = b"".join(frames)
    assert data.endswith(b"\r\n\r\n") and b"[DONE]" not in data
    events = [e for e in data.split(b"\r\n\r\n") if e.strip()]
    assert all(e.startswith(b"data: ") for e in events)
    return [json.loads(e[len(b"data: "):]) for e in events]


def test_sse_chunks() -> None:
    docs = sse_docs(run(GeminiStreamEncoder("gm-1", sse=True), story()))
    parts = [d["candidates"][0]["content"]["parts"] for d in docs]
    assert parts[0] == [{"text": "Let me ", "thought": True}] and parts[1] == [{"text": "think.", "thought": True}]
    assert parts[2][0]["text"] == "Listing" and carrier.unpack(parts[2][0]["thoughtSignature"]) == [
        ReasoningPart(text="Let me think.", signature=ANTHROPIC_SIG)]
    assert parts[3] == [{"text": " now\u2028."}]
    assert parts[4] == [{"functionCall": {"name": "ls", "args": {"dir": "/"}, "id": "toolu_1"}}]
    last = docs[-1]
    assert last["candidates"][0]["finishReason"] == "STOP" and parts[-1] == [{"text": ""}]
    assert last["usageMetadata"] == {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 21,
                                     "thoughtsTokenCount": 2}
    assert last["candidates"][0]["citationMetadata"] == {"citations": [
        {"startIndex": 0, "endIndex": 7, "uri": "https://e.org"}]}
    assert all(d["modelVersion"] == "gm-1" and d["responseId"] == "r1" for d in docs)
    assert all("finishReason" not in d["candidates"][0] and "usageMetadata" not in d for d in docs[:-1])


def test_line_separators_are_escaped() -> None:
    data = b"".join(run(GeminiStreamEncoder("m", sse=True), story()))
    assert "\u2028".encode() not in data and b"\\u2028" in data


def with_keepalives(sse: bool) -> list[bytes]:
    enc = GeminiStreamEncoder("gm-1", sse=sse)
    frames = [*enc.keepalive()]
    for ev in story():
        frames += enc.encode(ev) + enc.keepalive()
    return frames


def test_the_sdk_reads_the_sse_stream_at_every_split() -> None:
    frames = with_keepalives(sse=True)
    data = b"".join(frames)
    whole = sdk_stream(frames)
    assert "".join(r.text or "" for r in whole) == "Listing now\u2028."
    assert [c.name for r in whole for c in r.function_calls or []] == ["ls"]
    assert whole[-1].candidates and whole[-1].candidates[0].finish_reason == types.FinishReason.STOP
    dumped = [r.model_dump(mode="json") for r in whole]
    sdk = FakeSDK()
    for cut in range(1, len(data)):
        assert [r.model_dump(mode="json") for r in sdk_stream([data[:cut], data[cut:]], sdk)] == dumped


def test_keepalive_blank_lines_are_read_as_nothing_but_a_comment_breaks_the_sdk() -> None:
    frames = with_keepalives(sse=True)
    assert frames[0] == b"\r\n" and frames[-1].startswith(b"data: ")  # done: no keepalive after the end
    assert "".join(r.text or "" for r in sdk_stream(frames)) == "Listing now\u2028."
    with pytest.raises(errors.UnknownApiResponseError):  # why not ": keepalive" (module docstring)
        sdk_stream([b": keepalive\r\n\r\n", *run(GeminiStreamEncoder("m", sse=True), story())])


# The two JavaScript SSE loops: the one inside gemini-cli 0.61's bundle (@google/genai's older
# `processStreamResponse`, a regex anchored at the buffer's start) and js-genai's current one
# (`src/_api_client.ts`: split at the first blank line, keep events starting `data:`). Both
# re-implemented as they read, run on the bytes at every split point.
JS_PARSERS = r"""
import fs from 'fs';
const data = fs.readFileSync(0);
const re = /^\s*data: (.*)(?:\n\n|\r\r|\r\n\r\n)/;
function oldParse(chunks) {
  const out = []; let buf = ''; const dec = new TextDecoder('utf-8');
  for (const c of chunks) { buf += dec.decode(c, {stream: true});
    let m = buf.match(re);
    while (m) { out.push(JSON.parse(m[1])); buf = buf.slice(m[0].length); m = buf.match(re); } }
  if (buf.trim().length > 0) throw new Error('Incomplete JSON segment at the end');
  return out;
}
function newParse(chunks) {
  const out = []; let buf = ''; const dec = new TextDecoder('utf-8'); const delims = ['\n\n', '\r\r', '\r\n\r\n'];
  for (const c of chunks) { buf += dec.decode(c, {stream: true});
    while (true) { let di = -1, dl = 0;
      for (const d of delims) { const i = buf.indexOf(d); if (i !== -1 && (di === -1 || i < di)) { di = i; dl = d.length; } }
      if (di === -1) break;
      const ev = buf.substring(0, di).trim(); buf = buf.substring(di + dl);
      if (ev.startsWith('data:')) out.push(JSON.parse(ev.substring(5).trim())); } }
  return out;
}
const whole = JSON.stringify(oldParse([data]));
if (JSON.stringify(newParse([data])) !== whole) throw new Error('the parsers differ');
for (let cut = 1; cut < data.length; cut++) {
  const parts = [data.subarray(0, cut), data.subarray(cut)];
  if (JSON.stringify(oldParse(parts)) !== whole || JSON.stringify(newParse(parts)) !== whole)
    throw new Error('differs at ' + cut);
}
process.stdout.write(whole);
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_javascript_parsers_read_the_stream_at_every_split() -> None:
    frames = with_keepalives(sse=True)

    def js(data: bytes) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["node", "--input-type=module", "-e", JS_PARSERS], input=data, capture_output=True,
                              timeout=60, check=False)

    done = js(b"".join(frames))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == sse_docs(run(GeminiStreamEncoder("gm-1", sse=True), story()))
    # what the encoder avoids: a raw U+2028 and a comment line stall gemini-cli's regex
    assert js('data: {"a":"x\u2028y"}\r\n\r\n'.encode()).returncode != 0
    assert js(b": keepalive\r\n\r\ndata: {}\r\n\r\n").returncode != 0


def test_stream_reasoning_left_out_when_not_asked() -> None:
    enc = GeminiStreamEncoder("m", sse=True, include_thoughts=False)
    docs = sse_docs(run(enc, story()))
    assert not any(p.get("thought") for d in docs for p in d["candidates"][0]["content"]["parts"])
    assert carrier.is_token(docs[0]["candidates"][0]["content"]["parts"][0]["thoughtSignature"])
    assert enc.dropped == {"reasoning": 1}


def test_signature_with_nothing_after_it_goes_on_the_last_chunk() -> None:
    docs = sse_docs(run(GeminiStreamEncoder("m", sse=True), [
        Start(id="r", model="m", created=0), BlockStart(ReasoningPart(), 0), Delta("t", 0),
        Signature(encrypted="enc", block=0), BlockStop(0), Finish(ir.LENGTH)]))
    last = docs[-1]["candidates"][0]
    assert last["finishReason"] == "MAX_TOKENS"
    assert carrier.unpack(last["content"]["parts"][0]["thoughtSignature"]) == [ReasoningPart(text="t", encrypted="enc")]


def test_stream_safety_block_with_nothing_said() -> None:
    docs = sse_docs(run(GeminiStreamEncoder("m", sse=True), [Start(id="r", model="m", created=0),
                                                            Finish(ir.CONTENT_FILTER)]))
    assert docs == [{"candidates": [{"finishReason": "SAFETY", "index": 0}], "modelVersion": "m", "responseId": "r",
                     "usageMetadata": {"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0}}]


def test_streamed_reasoning_round_trips_through_the_sdk_chat() -> None:
    sdk = FakeSDK()
    sdk.answers += [run(GeminiStreamEncoder("m", sse=True), story()), encode(answer(TextPart("ok")), "m")]
    chat = sdk.client.chats.create(model="m")
    list(chat.send_message_stream("first"))
    chat.send_message(types.Part.from_function_response(name="ls", response={"output": "a"}))
    parts = decode({"model": "m", **sdk.sent[1]}).messages[1].parts
    assert parts == [ReasoningPart(text="Let me think.", signature=ANTHROPIC_SIG), TextPart("Listing"),
                     TextPart(" now\u2028."), ToolCallPart(id="toolu_1", name="ls", arguments='{"dir": "/"}')]


def test_sse_failure_mid_stream_raises_in_the_sdk() -> None:
    enc = GeminiStreamEncoder("m", sse=True)
    frames = run(enc, story()[:8]) + enc.fail(ErrorInfo("rate_limit", "slow down", 429))
    assert enc.done and enc.encode(Finish(ir.STOP)) == [] and enc.fail(ErrorInfo("api_error", "x")) == []
    # the bare error object, in a write of its own (framing.py says why)
    assert json.loads(frames[-1]) == {"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}}
    assert frames[-1].endswith(b"}\r\n\r\n")
    with pytest.raises(errors.ClientError) as caught:
        sdk_stream(frames)
    assert caught.value.code == 429


def test_failure_event_ends_the_stream_too() -> None:
    enc = GeminiStreamEncoder("m", sse=False)
    frames = run(enc, [*story()[:3], Failure(ErrorInfo("overloaded", "busy", 529))])
    doc = json.loads(b"".join(frames))
    assert doc[-1] == {"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}} and enc.done


def test_array_mode() -> None:
    enc = GeminiStreamEncoder("gm-1", sse=False)
    assert enc.keepalive() == [b"[\n"]  # opens the array: whitespace may come before an element
    frames = with_keepalives(sse=False)
    data = b"".join(frames)
    assert data.startswith(b"[\n") and data.endswith(b"]") and b",\r\n{" in data
    docs = json.loads(data)
    assert docs == sse_docs(run(GeminiStreamEncoder("gm-1", sse=True), story()))


def test_array_mode_failure_before_anything() -> None:
    enc = GeminiStreamEncoder("m", sse=False)
    frames = enc.fail(ErrorInfo("api_error", "boom", 500))
    assert json.loads(b"".join(frames)) == [{"error": {"code": 500, "message": "boom", "status": "INTERNAL"}}]


def test_custom_tool_call_streams_as_a_function_call() -> None:
    docs = sse_docs(run(GeminiStreamEncoder("m", sse=True), [
        Start(id="r", model="m", created=0), BlockStart(ToolCallPart(id="c1", name="patch", kind="custom"), 0),
        Delta("*** Begin", 0), BlockStop(0), Finish(ir.TOOL_CALLS)]))
    assert docs[0]["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "patch", "args": {"input": "*** Begin"}, "id": "c1"}}]
