"""Gemini clients (the real google-genai SDK, and raw HTTP where the wire itself is the point) through
a live gunicorn + gevent proxy in front of the demo speaking each upstream protocol: text and a
function-call round trip, streamed and whole; countTokens in both shapes; the paged model list;
the JSON-array stream; the `:` percent-encoded; keys as `x-goog-api-key`, `?key=` (never in the
access line) and Bearer; bad input answered 400 in Gemini's error shape naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer
from tests.integration.upstreams import WEATHER_PARAMS, proxy_speaking, words
from tests.wire import request

MODEL = "demo-model"
UPSTREAMS = ["chat_completions", "messages", "responses", "gemini"]


@pytest.fixture(scope="module", params=UPSTREAMS)
def any_upstream(request: pytest.FixtureRequest, demo_upstream: DemoUpstream,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    with proxy_speaking(request.param, demo_upstream, Path(tmp_path_factory.mktemp(f"gemini-{request.param}"))) as s:
        yield s


def client(proxy: ProxyServer, key: str = CLIENT_KEY) -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=proxy.url, timeout=20_000))


WEATHER = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather", description="The weather in a city", parameters_json_schema=WEATHER_PARAMS)])


@pytest.mark.parametrize("stream", [False, True])
def test_text(any_upstream: ProxyServer, stream: bool) -> None:
    gm = client(any_upstream)
    config = types.GenerateContentConfig(system_instruction="Be brief.", max_output_tokens=60, temperature=0.5)
    prompt = "hi [demo:words=6] [demo:pace=0]"
    if stream:
        chunks = list(gm.models.generate_content_stream(model=MODEL, contents=prompt, config=config))
        text = "".join(c.text or "" for c in chunks)
        last = chunks[-1]
        assert len(chunks) > 1
    else:
        last = gm.models.generate_content(model=MODEL, contents=prompt, config=config)
        text = last.text or ""
    assert text == words(6)
    assert last.candidates and last.candidates[0].finish_reason == types.FinishReason.STOP
    usage = last.usage_metadata
    assert usage is not None and usage.candidates_token_count == 6 and (usage.prompt_token_count or 0) > 0
    assert usage.total_token_count == (usage.prompt_token_count or 0) + 6 + (usage.thoughts_token_count or 0)
    assert last.model_version == MODEL


@pytest.mark.parametrize("stream", [False, True])
def test_function_call_round_trip(any_upstream: ProxyServer, stream: bool) -> None:
    gm = client(any_upstream)
    config = types.GenerateContentConfig(tools=[WEATHER], automatic_function_calling=types.AutomaticFunctionCallingConfig(
        disable=True))
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="Weather in Paris? [demo:tool] [demo:pace=0]")])]
    if stream:
        chunks = list(gm.models.generate_content_stream(model=MODEL, contents=contents, config=config))
        parts = [p for c in chunks if c.candidates for p in (c.candidates[0].content.parts or [])  # type: ignore[union-attr]
                 if c.candidates[0].content]
        calls = [p.function_call for p in parts if p.function_call]
    else:
        first = gm.models.generate_content(model=MODEL, contents=contents, config=config)
        assert first.candidates and first.candidates[0].content
        parts = list(first.candidates[0].content.parts or [])
        calls = [p.function_call for p in parts if p.function_call]
    (call,) = calls
    assert call.name == "get_weather" and call.args == {"city": "Paris"}
    contents += [types.Content(role="model", parts=parts),
                 types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
                     name="get_weather", id=call.id, response={"result": "sunny, 21C"}))])]
    second = gm.models.generate_content(model=MODEL, contents=contents, config=config)
    assert "sunny, 21C" in (second.text or "")


def test_count_tokens_both_shapes(any_upstream: ProxyServer) -> None:
    gm = client(any_upstream)  # held: a Client closes its connection pool when collected
    counted = gm.models.count_tokens(model=MODEL, contents="How many tokens is this?")
    assert (counted.total_tokens or 0) > 0
    body = {"generateContentRequest": {"model": f"models/{MODEL}",
                                       "contents": [{"role": "user", "parts": [{"text": "How many tokens is this?"}]}]}}
    raw = request(any_upstream.url, "POST", f"/v1beta/models/{MODEL}:countTokens", body,
                  headers={"x-goog-api-key": CLIENT_KEY})
    assert raw.status == 200 and raw.json() == {"totalTokens": counted.total_tokens}


def test_models_paged_and_one(any_upstream: ProxyServer) -> None:
    gm = client(any_upstream)
    names = [m.name for m in gm.models.list(config={"page_size": 1})]
    assert f"models/{MODEL}" in names and len(names) == len(set(names))
    one = gm.models.get(model=MODEL)
    assert one.name == f"models/{MODEL}" and one.input_token_limit and one.output_token_limit
    assert "generateContent" in (one.supported_actions or [])


def test_json_array_stream_and_encoded_colon(any_upstream: ProxyServer) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi [demo:words=3] [demo:pace=0]"}]}]}
    raw = request(any_upstream.url, "POST", f"/v1beta/models/{MODEL}%3AstreamGenerateContent", body,
                  headers={"x-goog-api-key": CLIENT_KEY})
    assert raw.status == 200 and raw.headers["content-type"].startswith("application/json")
    chunks = json.loads(raw.body())
    assert isinstance(chunks, list) and len(chunks) > 1
    text = "".join(p.get("text", "") for c in chunks for p in c["candidates"][0]["content"].get("parts", []))
    assert text == words(3) and chunks[-1]["candidates"][0]["finishReason"] == "STOP"


def test_sse_stream_has_no_done(any_upstream: ProxyServer) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi [demo:words=2] [demo:pace=0]"}]}]}
    raw = request(any_upstream.url, "POST", f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse", body,
                  headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert raw.status == 200 and raw.headers["content-type"].startswith("text/event-stream")
    data = raw.body()
    frames = [f for f in data.replace(b"\r\n", b"\n").split(b"\n\n") if f]
    assert frames and all(f.startswith(b"data: {") for f in frames) and b"[DONE]" not in data


def test_key_in_query_is_accepted_and_never_logged(any_upstream: ProxyServer) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi [demo:words=2] [demo:pace=0]"}]}]}
    raw = request(any_upstream.url, "POST", f"/v1beta/models/{MODEL}:generateContent?key={CLIENT_KEY}", body)
    assert raw.status == 200
    assert CLIENT_KEY not in any_upstream.log()


def test_wrong_key_is_a_gemini_error(any_upstream: ProxyServer) -> None:
    gm = client(any_upstream, key="not-a-key")
    with pytest.raises(genai_errors.ClientError) as caught:
        gm.models.generate_content(model=MODEL, contents="hi")
    assert caught.value.code == 401 and caught.value.status == "UNAUTHENTICATED"
    assert "Invalid API key" in (caught.value.message or "")


@pytest.mark.parametrize(("body", "field"), [
    ({"contents": [{"role": "user", "parts": []}]}, "contents[0].parts"),
    ({"contents": [{"role": "user"}]}, "contents[0].parts"),
    ({"contents": [{"role": "user", "parts": [{"bogus": 1}]}]}, "contents[0].parts[0]"),
])
def test_bad_input_names_the_field(any_upstream: ProxyServer, body: dict[str, Any], field: str) -> None:
    raw = request(any_upstream.url, "POST", f"/v1beta/models/{MODEL}:generateContent", body,
                  headers={"x-goog-api-key": CLIENT_KEY})
    error = raw.json()["error"]
    assert raw.status == 400 and error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    assert field in error["message"]


def test_count_tokens_with_both_shapes_is_refused(any_upstream: ProxyServer) -> None:
    contents = [{"role": "user", "parts": [{"text": "hi"}]}]
    body = {"contents": contents, "generateContentRequest": {"model": f"models/{MODEL}", "contents": contents}}
    raw = request(any_upstream.url, "POST", f"/v1beta/models/{MODEL}:countTokens", body,
                  headers={"x-goog-api-key": CLIENT_KEY})
    error = raw.json()["error"]
    assert raw.status == 400 and error["status"] == "INVALID_ARGUMENT" and "generateContentRequest" in error["message"]


def test_unknown_method_is_a_gemini_404(any_upstream: ProxyServer) -> None:
    raw = request(any_upstream.url, "POST", f"/v1beta/models/{MODEL}:predict", {"instances": []},
                  headers={"x-goog-api-key": CLIENT_KEY})
    error = raw.json()["error"]
    assert raw.status == 404 and error["status"] == "NOT_FOUND"
