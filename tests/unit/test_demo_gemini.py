"""The demo upstream's Gemini face (`/v1beta`), driven through the demo's request handler with a
writer that keeps what it is given: routing (`:` or `%3A`, a `models/` prefix, any prefix before
`/v1beta`), both key placements, the models list's pages, countTokens' two shapes, the answer
whole, as SSE and as a JSON array — every object checked against google-genai's own types — and
thought signatures: issued where Gemini 3 puts them, and enforced on the current turn only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.genai import types

from proxy.demo import gemini_signatures
from proxy.demo.http import HTTPRequest, Writer
from proxy.demo.scenarios import ANSWER, THOUGHT
from proxy.demo.upstream import DemoUpstream

KEY = {"x-goog-api-key": "sk-gemini-1"}
BASH = {"functionDeclarations": [{"name": "Bash", "description": "run a command", "parametersJsonSchema": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]}
WEATHER = {"functionDeclarations": [{"name": "get_weather", "parameters": {
    "type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}}]}
G3 = "gemini-3-pro-preview"
MISSING = ("Function call is missing a thought_signature in functionCall parts. This is required for tools to work "
           "correctly, and missing thought_signature may lead to degraded model performance. Additional data, "
           "function call `default_api:Bash` , position {}. Please refer to "
           "https://ai.google.dev/gemini-api/docs/thought-signatures for more details.")


class Kept(Writer):
    """A Writer with no socket: keeps the status, headers and body bytes."""

    def __init__(self) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.status = 0
        self.content_type = ""
        self.headers: dict[str, str] = {}
        self.data = b""
        self.ended = self.dropped = False

    def response(self, status: int, body: bytes, content_type: str = "application/json",
                 headers: dict[str, str] | None = None) -> None:
        self.status, self.data, self.content_type, self.headers = status, body, content_type, dict(headers or {})

    def start_stream(self, content_type: str = "text/event-stream", chunked: bool = True) -> None:
        self.status, self.content_type = 200, content_type

    def send(self, data: bytes) -> None:
        self.data += data

    def end(self) -> None:
        self.ended = True

    def drop(self) -> None:
        self.dropped = True

    def peer_closed(self) -> bool:
        return False

    def json(self) -> Any:
        return json.loads(self.data)

    def events(self) -> list[dict[str, Any]]:
        """The SSE events' objects (each `data: {…}` ended by CRLF CRLF, no [DONE])."""
        assert self.data.endswith(b"\r\n\r\n")
        frames = self.data.split(b"\r\n\r\n")[:-1]
        assert all(f.startswith(b"data: ") for f in frames)
        return [json.loads(f[len(b"data: "):]) for f in frames]


@pytest.fixture
def demo() -> DemoUpstream:
    return DemoUpstream()


def call(demo: DemoUpstream, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
         query: dict[str, str] | None = None) -> Kept:
    w = Kept()
    raw = json.dumps(body).encode() if body is not None else b""
    demo(HTTPRequest(method, path, dict(query or {}), dict(KEY if headers is None else headers), raw), w)
    return w


def ask(text: str, **extra: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": f"{text} [demo:pace=0]"}]}], **extra}


def generate(demo: DemoUpstream, body: dict[str, Any], model: str = "demo-model", how: str = "whole") -> Any:
    """The answer's objects, each parsed by google-genai's types (`how`: whole | sse | array)."""
    method = "generateContent" if how == "whole" else "streamGenerateContent"
    w = call(demo, "POST", f"/v1beta/models/{model}:{method}", body, query={"alt": "sse"} if how == "sse" else None)
    assert w.status == 200, w.data
    if how == "whole":
        objects = [w.json()]
        assert w.content_type == "application/json"
    elif how == "sse":
        objects = w.events()
        assert w.content_type == "text/event-stream" and w.ended
    else:
        objects = w.json()
        assert w.content_type == "application/json" and isinstance(objects, list) and w.ended
        assert b",\r\n" in w.data or len(objects) == 1
    for obj in objects:  # (on a copy: the SDK's validators rename fields in place)
        types.GenerateContentResponse.model_validate(json.loads(json.dumps(obj)))
    return objects


def parts(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for o in objects for p in o["candidates"][0]["content"].get("parts", [])]


def text_of(objects: list[dict[str, Any]], thought: bool = False) -> str:
    return "".join(p.get("text", "") for p in parts(objects) if bool(p.get("thought")) == thought)


# ---------------------------------------------------------------- the wire


@pytest.mark.parametrize("how", ["whole", "sse", "array"])
def test_a_text_answer_whole_as_sse_and_as_an_array(demo: DemoUpstream, how: str) -> None:
    objects = generate(demo, ask("Hello!"), how=how)
    assert text_of(objects) == ANSWER
    last = objects[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    usage = last["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"] > 0
    assert "thoughtsTokenCount" not in usage
    assert all("finishReason" not in o["candidates"][0] for o in objects[:-1])
    assert {o["modelVersion"] for o in objects} == {"demo-model"}
    assert len({o["responseId"] for o in objects}) == 1
    if how != "whole":
        assert len(objects) > 10  # word by word; earlier chunks carry the prompt's count only
        assert objects[0]["usageMetadata"] == {"promptTokenCount": usage["promptTokenCount"],
                                               "totalTokenCount": usage["promptTokenCount"]}
    assert not any("thoughtSignature" in p for p in parts(objects))  # demo-model signs nothing


@pytest.mark.parametrize("path", ["/v1beta/models/demo-model%3AstreamGenerateContent",
                                  "/v1beta/models/demo-model%3astreamGenerateContent",
                                  "/v1/v1beta/models/models/demo-model:streamGenerateContent"])
def test_the_colon_may_be_percent_encoded_and_a_prefix_is_accepted(demo: DemoUpstream, path: str) -> None:
    w = call(demo, "POST", path, ask("Hello!"), query={"alt": "sse"})
    assert w.status == 200 and "".join(p["text"] for e in w.events() for p in e["candidates"][0]["content"]["parts"]
                                       ) == ANSWER


def test_keys_as_the_header_or_the_query_and_none_is_refused_as_google_does(demo: DemoUpstream) -> None:
    path = "/v1beta/models/demo-model:generateContent"
    by_query = call(demo, "POST", path, ask("hi"), headers={}, query={"key": "sk-query"})
    by_header = call(demo, "POST", path, ask("hi"), headers={"x-goog-api-key": "sk-header"})
    assert by_query.status == by_header.status == 200
    assert [r["key"] for r in demo.records] == ["sk-query", "sk-header"]
    none = call(demo, "POST", path, ask("hi"), headers={})
    assert none.status == 403
    assert none.json()["error"]["status"] == "PERMISSION_DENIED" and none.json()["error"]["code"] == 403


def test_a_key_fault_answers_in_googles_envelope(demo: DemoUpstream) -> None:
    demo.key_faults["sk-gemini-1"] = {"status": 503}
    w = call(demo, "POST", "/v1beta/models/demo-model:generateContent", ask("hi"))
    assert w.status == 503 and w.json()["error"]["status"] == "UNAVAILABLE"


def test_the_models_list_in_pages_and_one_model(demo: DemoUpstream) -> None:
    names, token, pages = [], None, 0
    while True:
        w = call(demo, "GET", "/v1beta/models", query={"pageSize": "3", **({"pageToken": token} if token else {})})
        assert w.status == 200
        page = w.json()
        assert 0 < len(page["models"]) <= 3
        for entry in page["models"]:  # (types.Model is the SDK's renaming of these REST fields)
            assert entry["name"].startswith("models/") and entry["inputTokenLimit"] > entry["outputTokenLimit"] > 0
            assert entry["supportedGenerationMethods"][:2] == ["generateContent", "countTokens"]
            assert entry["thinking"] is True
        names += [m["name"] for m in page["models"]]
        pages += 1
        token = page.get("nextPageToken")
        if not token:
            break
    assert pages == 3 and len(names) == len(set(names)) == 9 and "models/gemini-3-pro-preview" in names
    assert [m["name"] for m in call(demo, "GET", "/v1beta/models").json()["models"]] == names  # default: 50
    one = call(demo, "GET", "/v1beta/models/gemini-2.5-flash")
    assert one.status == 200 and one.json()["name"] == "models/gemini-2.5-flash"
    bad = call(demo, "GET", "/v1beta/models", query={"pageToken": "nope"})
    assert bad.status == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_count_tokens_takes_contents_or_a_whole_request_never_both(demo: DemoUpstream) -> None:
    body = ask("Count me, please.")
    path = "/v1beta/models/demo-model:countTokens"
    alone = call(demo, "POST", path, {"contents": body["contents"]})
    wrapped = call(demo, "POST", path.replace(":", "%3A"), {"generateContentRequest": {"model": "models/demo-model",
                                                                                        **body}})
    assert alone.status == wrapped.status == 200
    assert alone.json()["totalTokens"] == wrapped.json()["totalTokens"] > 0
    # (the SDK's type has no promptTokensDetails, which the REST answer has: its reader drops it)
    types.CountTokensResponse.model_validate({k: v for k, v in alone.json().items() if k != "promptTokensDetails"})
    answered = generate(demo, body)[0]["usageMetadata"]["promptTokenCount"]
    assert answered == alone.json()["totalTokens"]  # countTokens agrees with what the answer reports
    both = call(demo, "POST", path, {"contents": body["contents"], "generateContentRequest": body})
    assert both.status == 400 and "generateContentRequest" in both.json()["error"]["message"]


def test_bad_contents_are_refused_naming_the_field(demo: DemoUpstream) -> None:
    path = "/v1beta/models/demo-model:generateContent"
    empty = call(demo, "POST", path, {"contents": [{"role": "user", "parts": []}]})
    assert empty.status == 400
    assert empty.json()["error"]["message"] == ("* GenerateContentRequest.contents[0].parts: contents.parts must not "
                                                "be empty.\n")
    none = call(demo, "POST", path, {})
    assert none.status == 400 and "contents is not specified" in none.json()["error"]["message"]
    role = call(demo, "POST", path, {"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]})
    assert role.json()["error"]["message"] == "Please use a valid role: user, model."
    call_turn = {"role": "model", "parts": [{"functionCall": {"name": "Bash", "args": {}}},
                                            {"functionCall": {"name": "Bash", "args": {}}}]}
    one_answer = {"role": "user", "parts": [{"functionResponse": {"name": "Bash", "response": {"output": "x"}}}]}
    short = call(demo, "POST", path, {"contents": [ask("go")["contents"][0], call_turn, one_answer]})
    assert short.status == 400 and "number of function response parts" in short.json()["error"]["message"]
    stray = call(demo, "POST", path, {"contents": [ask("go")["contents"][0], one_answer]})
    assert "function response turn comes immediately after" in stray.json()["error"]["message"]


def test_a_directive_error_and_a_status_in_googles_envelope(demo: DemoUpstream) -> None:
    bad = call(demo, "POST", "/v1beta/models/demo-model:generateContent", ask("hi [demo:words=abc]"))
    assert bad.status == 400 and bad.json()["error"]["message"].startswith("demo upstream: [demo:words=abc]")
    limited = call(demo, "POST", "/v1beta/models/demo-model:streamGenerateContent", ask("hi [demo:status=429]"))
    assert limited.status == 429 and limited.headers == {"Retry-After": "10"}
    (error,) = limited.json()  # without alt=sse even the error comes in an array, as Google sends it
    assert error["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert error["error"]["details"][1] == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "10s"}


def test_an_error_mid_stream_is_one_more_event_then_the_connection_closes(demo: DemoUpstream) -> None:
    w = call(demo, "POST", "/v1beta/models/demo-model:streamGenerateContent", ask("hi [demo:fail-midstream]"),
             query={"alt": "sse"})
    events = w.events()
    assert events[-1]["error"]["status"] == "INTERNAL" and w.dropped and not w.ended


# ---------------------------------------------------------------- what the model says


@pytest.mark.parametrize("how", ["whole", "sse", "array"])
def test_a_function_call_comes_whole_in_one_part(demo: DemoUpstream, how: str) -> None:
    objects = generate(demo, ask("list files [demo:tool]", tools=[BASH]), how=how)
    calls = [p["functionCall"] for p in parts(objects) if "functionCall" in p]
    assert calls == [{"name": "Bash", "args": {"command": "echo hello from the llm-proxy demo"}}]
    assert "functionCall" in str(objects[-1]) and objects[-1]["candidates"][0]["finishReason"] == "STOP"


def test_thoughts_when_asked_for_and_their_tokens_apart_from_the_candidates(demo: DemoUpstream) -> None:
    config = {"generationConfig": {"thinkingConfig": {"includeThoughts": True, "thinkingLevel": "high"}}}
    for how in ("whole", "sse"):
        objects = generate(demo, ask("Hello!", **config), how=how)
        assert text_of(objects, thought=True) == THOUGHT and text_of(objects) == ANSWER
        usage = objects[-1]["usageMetadata"]
        assert usage["thoughtsTokenCount"] > 0
        assert usage["totalTokenCount"] == (usage["promptTokenCount"] + usage["candidatesTokenCount"]
                                            + usage["thoughtsTokenCount"])
    assert text_of(generate(demo, ask("Hello!")), thought=True) == ""  # not asked for: none shown


def test_tool_config_and_a_json_answer_are_read(demo: DemoUpstream) -> None:
    never = {"toolConfig": {"functionCallingConfig": {"mode": "NONE"}}}
    assert text_of(generate(demo, ask("[demo:tool]", tools=[BASH], **never))) == ANSWER
    forced = {"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["Bash"]}}}
    assert any("functionCall" in p for p in parts(generate(demo, ask("hello", tools=[BASH], **forced))))
    # gemini-cli's routing call: a JSON answer by a schema in OpenAPI's upper-case type names
    schema = {"type": "OBJECT", "properties": {"reasoning": {"type": "STRING"}, "model_choice": {
        "type": "STRING", "enum": ["flash", "pro"]}}, "required": ["reasoning", "model_choice"]}
    for field in ("responseSchema", "responseJsonSchema"):
        config = {"generationConfig": {"responseMimeType": "application/json", field: schema}}
        answer = json.loads(text_of(generate(demo, ask("route this", **config), model="gemini-2.5-flash-lite")))
        assert answer["model_choice"] == "flash" and isinstance(answer["reasoning"], str)


def test_a_dependent_chain_reads_function_responses_back(demo: DemoUpstream) -> None:
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "go [demo:chain=2] [demo:pace=0]"}]}]
    for step in (1, 2):
        (answer,) = generate(demo, {"contents": contents, "tools": [BASH]})
        content = answer["candidates"][0]["content"]
        (call_part,) = content["parts"]
        command = call_part["functionCall"]["args"]["command"]
        assert command == ("echo step1" if step == 1 else "echo step1 step2")
        contents += [content, {"role": "user", "parts": [{"functionResponse": {
            "name": "Bash", "response": {"output": command[len("echo "):]}}}]}]
    (final,) = generate(demo, {"contents": contents, "tools": [BASH]})
    assert text_of([final]) == "The tools returned, in order: step1 | step1 step2. That completes the task."


# ---------------------------------------------------------------- thought signatures


def test_signatures_where_gemini_3_puts_them_in_a_stream(demo: DemoUpstream) -> None:
    config = {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}}
    objects = generate(demo, ask("Hello!", **config), model=G3, how="sse")
    signed = [(i, p) for i, p in enumerate(parts(objects)) if "thoughtSignature" in p]
    (i_thought, after_thought), (i_text, last_text) = signed
    every = parts(objects)
    assert after_thought == {"text": "", "thoughtSignature": after_thought["thoughtSignature"]}  # empty, own part
    assert every[i_thought - 1].get("thought") and not every[i_thought + 1].get("thought")
    assert i_text == len(every) - 1 and last_text["text"] and not last_text.get("thought")  # the last text part
    for _, part in signed:
        assert gemini_signatures.valid(part["thoughtSignature"], G3, part)
        assert not gemini_signatures.valid(part["thoughtSignature"], "gemini-3-flash-preview", part)


def test_signatures_in_a_whole_answer_on_the_thought_and_the_text(demo: DemoUpstream) -> None:
    config = {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}}
    (answer,) = generate(demo, ask("Hello!", **config), model=G3)
    thought, text = answer["candidates"][0]["content"]["parts"]
    assert thought["thought"] and thought["thoughtSignature"] and text["thoughtSignature"]


@pytest.mark.parametrize("how", ["whole", "sse", "array"])
def test_parallel_calls_carry_one_signature_on_the_first(demo: DemoUpstream, how: str) -> None:
    objects = generate(demo, ask("[demo:parallel]", tools=[WEATHER]), model=G3, how=how)
    first, second = [p for p in parts(objects) if "functionCall" in p]
    assert [first["functionCall"]["args"], second["functionCall"]["args"]] == [{"city": "Paris"}, {"city": "Tokyo"}]
    assert gemini_signatures.valid(first["thoughtSignature"], G3, first) and "thoughtSignature" not in second
    assert not gemini_signatures.valid(first["thoughtSignature"], G3, second)  # bound to its call


def test_the_directive_signs_for_any_model_and_no_signature_is_given_otherwise(demo: DemoUpstream) -> None:
    (signed,) = generate(demo, ask("[demo:tool] [demo:gemini-signatures]", tools=[BASH]))
    assert signed["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
    (plain,) = generate(demo, ask("[demo:tool]", tools=[BASH]), model="gemini-2.5-flash")
    assert "thoughtSignature" not in plain["candidates"][0]["content"]["parts"][0]


def chain_turn(demo: DemoUpstream, model: str, prompt: str) -> list[dict[str, Any]]:
    """A user prompt and two steps of a chain, each model content as the demo gave it."""
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": prompt}]}]
    for _ in range(2):
        (answer,) = generate(demo, {"contents": contents, "tools": [BASH]}, model=model)
        command = answer["candidates"][0]["content"]["parts"][0]["functionCall"]["args"]["command"]
        contents += [answer["candidates"][0]["content"], {"role": "user", "parts": [{"functionResponse": {
            "name": "Bash", "response": {"output": command[len("echo "):]}}}]}]
    return contents


def refused(demo: DemoUpstream, contents: list[dict[str, Any]], model: str = G3) -> str | None:
    w = call(demo, "POST", f"/v1beta/models/{model}:generateContent", {"contents": contents, "tools": [BASH]})
    if w.status == 200:
        return None
    assert w.status == 400 and w.json()["error"]["status"] == "INVALID_ARGUMENT"
    message: str = w.json()["error"]["message"]
    return message


@pytest.mark.parametrize(("model", "prompt"), [(G3, "go [demo:chain=3] [demo:pace=0]"),
                                               ("demo-model", "go [demo:chain=3] [demo:enforce-signatures] "
                                                              "[demo:pace=0]")])
def test_enforcement_refuses_missing_forged_and_other_models_signatures(demo: DemoUpstream, model: str,
                                                                        prompt: str) -> None:
    contents = chain_turn(demo, model, prompt)
    assert refused(demo, contents, model) is None  # given back as they came: the chain goes on

    def with_signature(step: int, value: str | None) -> list[dict[str, Any]]:
        changed = json.loads(json.dumps(contents))
        part = changed[1 + 2 * step]["parts"][0]
        part.pop("thoughtSignature")
        if value is not None:
            part["thoughtSignature"] = value
        return changed

    assert refused(demo, with_signature(0, None), model) == MISSING.format(2)
    assert refused(demo, with_signature(1, None), model) == MISSING.format(4)
    forged = "6IS7b6pk3TT7a3MhNMF21PJPWnOAhsk61aAUXOLwVdY="
    assert refused(demo, with_signature(1, forged), model) == "Corrupted thought signature."
    other = gemini_signatures.mint("gemini-3-flash-preview", "call", contents[3]["parts"][0]["functionCall"])
    assert refused(demo, with_signature(1, other), model) == "Corrupted thought signature."
    moved = contents[1]["parts"][0]["thoughtSignature"]  # step 1's, on step 2's call
    assert refused(demo, with_signature(1, moved), model) == "Corrupted thought signature."
    assert refused(demo, with_signature(0, "skip_thought_signature_validator"), model) is None
    if model == G3:  # a model that is not Gemini 3, with no directive, enforces nothing
        assert refused(demo, with_signature(0, None), "gemini-2.5-flash") is None


def test_earlier_turns_are_not_validated(demo: DemoUpstream) -> None:
    contents = chain_turn(demo, G3, "go [demo:chain=3] [demo:pace=0]")
    earlier = json.loads(json.dumps(contents))
    earlier[1]["parts"][0].pop("thoughtSignature")
    earlier[3]["parts"][0]["thoughtSignature"] = "forged"
    earlier += [{"role": "model", "parts": [{"text": "Done."}]},
                {"role": "user", "parts": [{"text": "thanks [demo:pace=0]"}]}]
    assert refused(demo, earlier) is None
    assert refused(demo, earlier[:5]) is not None  # the same history as the current turn is refused


def test_a_refusal_on_a_stream_without_sse_is_an_array(demo: DemoUpstream) -> None:
    contents = chain_turn(demo, G3, "go [demo:chain=3] [demo:pace=0]")
    contents[1]["parts"][0].pop("thoughtSignature")
    w = call(demo, "POST", f"/v1beta/models/{G3}:streamGenerateContent", {"contents": contents, "tools": [BASH]})
    assert w.status == 400 and w.json()[0]["error"]["message"] == MISSING.format(2)


def test_a_signature_sent_back_url_safe_and_unpadded_is_the_same_signature(demo: DemoUpstream) -> None:
    """google-genai decodes a signature to bytes and sends it back in base64's URL-safe alphabet."""
    contents = chain_turn(demo, G3, "go [demo:chain=3] [demo:pace=0]")
    for content in contents[1::2]:
        part = content["parts"][0]
        part["thoughtSignature"] = part["thoughtSignature"].replace("+", "-").replace("/", "_").rstrip("=")
    assert refused(demo, contents) is None


def test_field_names_in_snake_case_are_read_as_google_reads_them(demo: DemoUpstream) -> None:
    """Google's JSON parser takes a field's proto name too; google-genai sends `parameters_json_schema`."""
    tool = {"function_declarations": [{"name": "Bash", "parameters_json_schema": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]}
    body = {"contents": [{"role": "user", "parts": [{"text": "[demo:tool] [demo:pace=0]"}]}], "tools": [tool],
            "tool_config": {"function_calling_config": {"mode": "ANY"}},
            "generation_config": {"thinking_config": {"include_thoughts": True}}}
    (answer,) = generate(demo, body, model=G3)
    thought, call_part = answer["candidates"][0]["content"]["parts"]
    assert thought["thought"] and call_part["functionCall"]["args"] == {"command": "echo hello from the llm-proxy demo"}
    contents = [*body["contents"], {"role": "model", "parts": [{
        "function_call": call_part["functionCall"], "thought_signature": call_part["thoughtSignature"]}]},
        {"role": "user", "parts": [{"function_response": {"name": "Bash", "response": {"output": "hi"}}}]}]
    assert refused(demo, contents) is None
    del contents[1]["parts"][0]["thought_signature"]
    assert refused(demo, contents) == MISSING.format(2)


def test_the_stable_version_path_when_a_gemini_key_comes_with_it(demo: DemoUpstream) -> None:
    """google-genai 3 speaks `/v1` by default; `/v1/models` without a Gemini key stays OpenAI's list."""
    (answer,) = [call(demo, "POST", "/v1/models/demo-model:generateContent", ask("Hello!")).json()]
    assert text_of([answer]) == ANSWER
    assert call(demo, "GET", "/v1/models", query={"key": "k"}, headers={}).json()["models"][0]["name"].startswith(
        "models/")
    assert call(demo, "GET", "/v1/models", headers={"authorization": "Bearer k"}).json()["object"] == "list"


@pytest.mark.parametrize("how", ["whole", "sse"])
def test_a_cited_answer_names_its_source_as_the_gemini_api_does(demo: DemoUpstream, how: str) -> None:
    objects = generate(demo, ask("[demo:cite]"), how=how)
    text = text_of(objects)
    (source,) = objects[-1]["candidates"][0]["citationMetadata"]["citationSources"]
    assert source["uri"] == "https://github.com/llm-proxy/llm-proxy#the-demo"
    assert (source["startIndex"], source["endIndex"]) == (0, len(text))
    parsed = types.GenerateContentResponse.model_validate(json.loads(json.dumps(objects[-1])))
    assert parsed.candidates and parsed.candidates[0].citation_metadata
    assert parsed.candidates[0].citation_metadata.citations  # the SDK's name for them


def test_gemini_clis_shell_tool_is_the_one_a_chain_calls(demo: DemoUpstream) -> None:
    """gemini-cli offers many tools, its shell one last among them: a chain calls the shell."""
    shell = {"name": "run_shell_command", "parametersJsonSchema": {"type": "object", "properties": {
        "command": {"type": "string"}, "description": {"type": "string"}}, "required": ["command"]}}
    listing = {"name": "list_directory", "parametersJsonSchema": {"type": "object", "properties": {
        "dir_path": {"type": "string"}}, "required": ["dir_path"]}}
    tools = [{"functionDeclarations": [listing, shell]}]
    (answer,) = generate(demo, ask("go [demo:chain=3]", tools=tools), model="gemini-2.5-pro")
    (part,) = answer["candidates"][0]["content"]["parts"]
    assert part["functionCall"] == {"name": "run_shell_command", "args": {"command": "echo step1"}}


def test_a_cached_prefix_is_counted_inside_the_prompt_as_gemini_counts_it(demo: DemoUpstream) -> None:
    first = ask("A long question [demo:cache]")
    assert "cachedContentTokenCount" not in generate(demo, first)[0]["usageMetadata"]
    again = {"contents": [*first["contents"], {"role": "model", "parts": [{"text": ANSWER}]},
                          {"role": "user", "parts": [{"text": "and more [demo:pace=0]"}]}]}
    for how in ("whole", "sse"):
        usage = generate(demo, again, how=how)[-1]["usageMetadata"]
        assert 0 < usage["cachedContentTokenCount"] <= usage["promptTokenCount"]  # (the second: all of it)
        assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
