"""Embeddings through one live gunicorn + gevent proxy in front of the demo upstream, whose vectors
are deterministic and written with eight decimals ("0.12300000": no JSON encoder prints a float so,
so a re-encoded number shows): the openai SDK (float and base64) gets the upstream's bytes as they
came; LangChain's OpenAIEmbeddings embeds documents and a query; a failing account makes the pool
move on; a named key's model globs and token limit apply, charged with the upstream's
`prompt_tokens`; an OpenAI client is served by a Gemini upstream and a Gemini client (google-genai)
by both kinds; a model only an Anthropic upstream serves is a 400 naming it. Every test checks what
reached the upstream as well as what the client got."""

from __future__ import annotations

import base64
import json
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from google import genai
from google.genai import types
from langchain_openai import OpenAIEmbeddings

from proxy.blueprints.state import app_state
from proxy.config import parse
from proxy.demo import embeddings as demo_embeddings
from proxy.serving.app import create_app
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY, account, admin
from tests.integration.test_request_records import Kept
from tests.state_files import migrated
from tests.wire import request

OAI_KEYS = ("sk-emb-oai-1", "sk-emb-oai-2")
GEM_KEY, ANTH_KEY = "sk-emb-gem-1", "sk-emb-anth-1"
RAG = "sk-emb-rag-0123456789"
OAI_MODEL, GEM_MODEL, ANTH_MODEL = "text-embedding-3-small", "gemini-embedding-001", "claude-only-embed"
FALLING = "text-embedding-falling"


@pytest.fixture(scope="module")
def emb(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    pool = {"probe": {"interval": 3600}}
    config = {
        "client_keys": [CLIENT_KEY, {"name": "rag", "key": RAG, "models": ["text-embedding-3-*"],
                                     "limits": {"tokens_per_minute": 40, "tokens_per_day": 100_000}}],
        "admin_keys": [ADMIN_KEY], "max_body_bytes": 20_000,
        # An embeddings model falls back past a model only a Messages upstream serves (skipped: it has
        # no embeddings) to a Gemini one.
        "fallbacks": {FALLING: [ANTH_MODEL, GEM_MODEL]},
        "upstreams": [
            {"name": "anth", "protocol": "messages", "base_url": demo_upstream.url, "pool": pool,
             "accounts": [{"id": "anth-0", "api_key": ANTH_KEY}], "models": {"serve": ["claude-only-*"]}},
            {"name": "oai", "protocol": "chat_completions", "base_url": demo_upstream.url, "pool": pool,
             "accounts": [{"id": f"oai-{i}", "api_key": k} for i, k in enumerate(OAI_KEYS)],
             "models": {"serve": ["text-embedding-*"]}},
            {"name": "gem", "protocol": "gemini", "base_url": demo_upstream.root, "pool": pool,
             "accounts": [{"id": "gem-0", "api_key": GEM_KEY}], "models": {"serve": ["gemini-embedding-*"]}},
        ],
    }
    server = start_proxy(config, Path(tmp_path_factory.mktemp("embeddings")))
    yield server
    stop_proxy(server)
    demo_upstream.control("/_demo/keys", method="DELETE")


def rid() -> str:
    return "emb-" + uuid.uuid4().hex


def client(proxy: ProxyServer, key: str = CLIENT_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0, timeout=20)


def gemini_client(proxy: ProxyServer, request_id: str) -> genai.Client:
    return genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(
        base_url=proxy.url, api_version="v1beta", headers={"X-Request-Id": request_id}, timeout=20_000))


def float32(texts: list[str]) -> list[float]:
    return list(struct.unpack(f"<{len(texts)}f", struct.pack(f"<{len(texts)}f", *map(float, texts))))


def only(demo: DemoUpstream, request_id: str) -> dict[str, Any]:
    (record,) = demo.requests(request_id)
    return record


def post(proxy: ProxyServer, path: str, body: dict[str, Any], key: str = CLIENT_KEY,
         request_id: str = "") -> tuple[int, Any]:
    resp = request(proxy.url, "POST", path, body, {"Authorization": f"Bearer {key}", "X-Request-Id": request_id or rid()})
    out = resp.status, resp.json()
    resp.close()
    return out


# ------------------------------------------------------------ OpenAI clients, OpenAI-compatible upstream

@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_openai_sdk_gets_the_upstreams_bytes(emb: ProxyServer, demo_upstream: DemoUpstream, encoding: str) -> None:
    request_id = rid()
    raw = client(emb).embeddings.with_raw_response.create(
        model=OAI_MODEL, input=["alpha", "beta"], encoding_format=encoding,  # type: ignore[arg-type]
        dimensions=6, user="u-1", extra_headers={"X-Request-Id": request_id})
    record = only(demo_upstream, request_id)
    assert record["path"] == "/v1/embeddings" and record["key"] in OAI_KEYS
    assert record["body"] == {"model": OAI_MODEL, "input": ["alpha", "beta"], "encoding_format": encoding,
                              "dimensions": 6, "user": "u-1"}
    status, sent = demo_embeddings.openai(record["body"])  # the demo is deterministic: what it sent
    assert status == 200 and raw.http_response.content == sent  # byte for byte
    answer = raw.parse()
    assert [d.index for d in answer.data] == [0, 1] and answer.usage.prompt_tokens == 2
    for item, text in zip(answer.data, ["alpha", "beta"], strict=True):
        numbers = demo_embeddings.numbers(text, 6)
        if encoding == "base64":  # asked explicitly, the SDK leaves the base64 text to the caller
            assert list(struct.unpack("<6f", base64.b64decode(item.embedding))) == float32(numbers)
        else:
            assert item.embedding == [float(n) for n in numbers]


def test_langchain_embeds_documents_and_a_query(emb: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    # check_embedding_ctx_length=False: LangChain sends the texts themselves, not tiktoken token arrays.
    lc = OpenAIEmbeddings(model=OAI_MODEL, base_url=f"{emb.url}/v1", api_key=CLIENT_KEY,  # type: ignore[arg-type]
                          check_embedding_ctx_length=False, max_retries=0,
                          default_headers={"X-Request-Id": request_id})
    docs = lc.embed_documents(["first doc", "second doc"])
    query = lc.embed_query("a question")
    assert docs == [float32(demo_embeddings.numbers(t, 8)) for t in ("first doc", "second doc")]
    assert query == float32(demo_embeddings.numbers("a question", 8))
    sent = [r["body"] for r in demo_upstream.requests(request_id)]
    # What it sends: the texts, asking for base64 (the openai SDK's default), no dimensions.
    assert [b["input"] for b in sent] == [["first doc", "second doc"], ["a question"]]
    assert all(b["encoding_format"] == "base64" and b["model"] == OAI_MODEL for b in sent)


def test_a_429_account_is_cooled_and_the_next_one_answers(emb: ProxyServer, demo_upstream: DemoUpstream) -> None:
    error = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
    demo_upstream.control("/_demo/keys", body={OAI_KEYS[0]: {"status": 429, "body": json.dumps(error),
                                                             "headers": {"Content-Type": "application/json"}}})
    try:
        ids = [rid(), rid()]
        for request_id in ids:
            answer = client(emb).embeddings.create(model=OAI_MODEL, input="pooled",
                                                   extra_headers={"X-Request-Id": request_id})
            assert answer.data[0].embedding == float32(demo_embeddings.numbers("pooled", 8))
        presented = [[r["key"] for r in demo_upstream.requests(i)] for i in ids]
        assert list(OAI_KEYS) in presented, presented  # tried, refused, answered by the other account
        assert account(emb, "oai", "oai-0")["status"] == "cooling"
    finally:
        demo_upstream.control("/_demo/keys", method="DELETE")
        admin(emb, "POST", "/admin/accounts/oai/oai-0/enable")


def test_a_fallback_skips_models_without_embeddings_and_the_gemini_one_answers(
        emb: ProxyServer, demo_upstream: DemoUpstream) -> None:
    exhausted = {"status": 429, "headers": {"Retry-After": "600"}}
    demo_upstream.control("/_demo/keys", body={key: exhausted for key in OAI_KEYS})
    try:
        request_id = rid()
        raw = client(emb).embeddings.with_raw_response.create(
            model=FALLING, input="fell", encoding_format="float", extra_headers={"X-Request-Id": request_id})
        answer = raw.parse()
        assert raw.headers["x-llm-proxy-model"] == GEM_MODEL and answer.model == GEM_MODEL
        assert answer.data[0].embedding == [float(n) for n in demo_embeddings.numbers("fell", 8)]
        keys = [r["key"] for r in demo_upstream.requests(request_id)]
        assert sorted(keys[:2]) == sorted(OAI_KEYS) and keys[2:] == [GEM_KEY]  # never the Messages upstream
        assert demo_upstream.requests(request_id)[-1]["path"] == f"/v1beta/models/{GEM_MODEL}:embedContent"
    finally:
        demo_upstream.control("/_demo/keys", method="DELETE")
        for n in range(len(OAI_KEYS)):
            admin(emb, "POST", f"/admin/accounts/oai/oai-{n}/enable")


def test_a_named_keys_globs_and_token_limit(emb: ProxyServer, demo_upstream: DemoUpstream) -> None:
    status, body = post(emb, "/v1/embeddings", {"model": GEM_MODEL, "input": "no"}, RAG)
    assert status == 403 and GEM_MODEL in body["error"]["message"]
    request_id, text = rid(), "x" * 130  # the upstream counts 32 tokens, the proxy estimates 33
    answer = client(emb, RAG).embeddings.create(model=OAI_MODEL, input=text, extra_headers={"X-Request-Id": request_id})
    assert answer.usage.prompt_tokens == 32 and len(demo_upstream.requests(request_id)) == 1
    resp = request(emb.url, "GET", "/admin/keys", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    (rag,) = [row for row in resp.json()["data"] if row["name"] == "rag"]
    resp.close()
    assert rag["budget"]["tokens_per_day"]["used"] == 32  # charged as the upstream counted
    assert 30 <= rag["budget"]["tokens_per_minute"]["used"] <= 32  # the bucket drains 40 a minute
    refused_id = rid()
    with pytest.raises(openai.RateLimitError) as refused:
        client(emb, RAG).embeddings.create(model=OAI_MODEL, input="y" * 40,
                                           extra_headers={"X-Request-Id": refused_id})
    assert "tokens_per_minute" in str(refused.value) and demo_upstream.requests(refused_id) == []
    usage = request(emb.url, "GET", "/admin/usage?group_by=endpoint,client_key",
                    headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
    rows = {(r["endpoint"], r["client_key"]): r for r in usage["rows"]}
    assert rows[("embeddings", "rag")]["input_tokens"] == 32 and rows[("embeddings", "rag")]["output_tokens"] == 0
    metrics = request(emb.url, "GET", "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).body().decode()
    assert any('endpoint="embeddings"' in line for line in metrics.splitlines()
               if line.startswith("llm_proxy_requests_total"))


# ------------------------------------------------------------ translation: Gemini upstreams, Gemini clients

def test_openai_client_to_a_gemini_upstream(emb: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    raw = client(emb).embeddings.with_raw_response.create(
        model=GEM_MODEL, input=["one", "two"], encoding_format="float", extra_headers={"X-Request-Id": request_id})
    record = only(demo_upstream, request_id)
    assert record["path"] == f"/v1beta/models/{GEM_MODEL}:batchEmbedContents" and record["key"] == GEM_KEY
    assert record["body"] == {"requests": [{"model": f"models/{GEM_MODEL}", "content": {"parts": [{"text": t}]}}
                                           for t in ("one", "two")]}
    content = raw.http_response.content
    for text in ("one", "two"):  # the floats exactly as the upstream wrote them
        assert f'"embedding":[{",".join(demo_embeddings.numbers(text, 8))}]'.encode() in content
    assert json.loads(content)["usage"] == {"prompt_tokens": 2, "total_tokens": 2}  # estimated: Gemini gives none

    request_id = rid()
    answer = client(emb).embeddings.create(model=GEM_MODEL, input="three", dimensions=4, encoding_format="base64",
                                           extra_headers={"X-Request-Id": request_id})
    record = only(demo_upstream, request_id)
    assert record["path"] == f"/v1beta/models/{GEM_MODEL}:embedContent"
    assert record["body"] == {"model": f"models/{GEM_MODEL}", "content": {"parts": [{"text": "three"}]},
                              "outputDimensionality": 4}
    assert isinstance(answer.data[0].embedding, str)  # asked explicitly, the SDK leaves base64 to the caller
    decoded = struct.unpack("<4f", base64.b64decode(answer.data[0].embedding))
    assert list(decoded) == float32(demo_embeddings.numbers("three", 4))


@pytest.mark.parametrize("model", [OAI_MODEL, GEM_MODEL])
def test_google_genai_client(emb: ProxyServer, demo_upstream: DemoUpstream, model: str) -> None:
    request_id = rid()
    gemini = gemini_client(emb, request_id)  # held: the SDK closes its HTTP client when it is collected
    answer = gemini.models.embed_content(
        model=model, contents=["red", "green"], config=types.EmbedContentConfig(output_dimensionality=5))
    assert answer.embeddings is not None
    assert [e.values for e in answer.embeddings] == [[float(n) for n in demo_embeddings.numbers(t, 5)]
                                                     for t in ("red", "green")]
    record = only(demo_upstream, request_id)
    if model == OAI_MODEL:  # translated: floats asked for, answered in Gemini's shape
        assert record["path"] == "/v1/embeddings" and record["key"] in OAI_KEYS
        assert record["body"] == {"model": OAI_MODEL, "input": ["red", "green"], "encoding_format": "float",
                                  "dimensions": 5}
    else:  # passed through, the model named as the upstream knows it
        assert record["path"] == f"/v1beta/models/{GEM_MODEL}:batchEmbedContents" and record["key"] == GEM_KEY
        assert [r["model"] for r in record["body"]["requests"]] == [f"models/{GEM_MODEL}"] * 2
        assert [r["outputDimensionality"] for r in record["body"]["requests"]] == [5, 5]


def test_a_gemini_client_gets_the_openai_upstreams_number_text(emb: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    resp = request(emb.url, "POST", f"/v1/models/{OAI_MODEL}:embedContent",
                   {"content": {"parts": [{"text": "raw"}]}, "outputDimensionality": 3},
                   {"x-goog-api-key": CLIENT_KEY, "X-Request-Id": request_id})
    assert resp.status == 200
    assert resp.body() == f'{{"embedding":{{"values":[{",".join(demo_embeddings.numbers("raw", 3))}]}}}}'.encode()
    resp.close()
    assert only(demo_upstream, request_id)["body"] == {"model": OAI_MODEL, "input": ["raw"], "encoding_format": "float",
                                                       "dimensions": 3}


# ------------------------------------------------------------ refusals

def test_refusals_name_what_is_wrong(emb: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    status, body = post(emb, "/v1/embeddings", {"model": ANTH_MODEL, "input": "hi"}, request_id=request_id)
    assert status == 400 and ANTH_MODEL in body["error"]["message"] and "messages" in body["error"]["message"]
    assert body["error"]["param"] == "model"
    status, body = post(emb, "/v1/embeddings", {"model": OAI_MODEL, "input": ["ok", 3]}, request_id=request_id)
    assert status == 400 and body["error"]["param"] == "input[1]"
    status, body = post(emb, "/v1/embeddings", {"model": OAI_MODEL, "input": "ok", "encoding_format": "int8"},
                        request_id=request_id)
    assert status == 400 and body["error"]["param"] == "encoding_format"
    status, body = post(emb, "/v1/embeddings", {"model": GEM_MODEL, "input": [[1, 2, 3]]}, request_id=request_id)
    assert status == 400 and "token array" in body["error"]["message"] and GEM_MODEL in body["error"]["message"]
    status, body = post(emb, f"/v1beta/models/{GEM_MODEL}:batchEmbedContents", {"requests": [{"content": {}}]},
                        request_id=request_id)  # a Gemini client's refusal is in Google's envelope
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT" and "requests[0].content" in \
        body["error"]["message"]
    status, body = post(emb, "/v1/embeddings", {"model": OAI_MODEL, "input": "z" * 30_000}, request_id=request_id)
    assert status == 413 and "max_body_bytes" in body["error"]["message"]
    assert demo_upstream.requests(request_id) == []  # none reached an upstream


def test_each_request_is_one_record_under_the_embeddings_endpoint(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    """In-process, with a hook that keeps what it is told: the answered request (its usage the
    upstream's prompt_tokens) and the ones refused for their key, OpenAI's and Gemini's paths alike."""
    app = create_app(parse(base_config(demo_upstream.url, state_path=migrated(tmp_path / "state.db"))),
                     start_background=False)
    kept = Kept()
    app_state(app).hooks.add(kept)
    web = app.test_client()
    resp = web.post("/v1/embeddings", json={"model": "demo-embed", "input": ["abcdefgh", "ijkl"]},
                    headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert resp.status_code == 200 and resp.get_json()["usage"]["prompt_tokens"] == 3
    assert web.post("/v1/embeddings", json={"model": "m", "input": "x"},
                    headers={"Authorization": "Bearer sk-wrong"}).status_code == 401
    assert web.post("/v1beta/models/m:embedContent", json={}, headers={"x-goog-api-key": "sk-wrong"}).status_code == 401
    answered, *refused = kept.done
    assert (answered.endpoint, answered.client_protocol, answered.model, answered.status, answered.attempts) == (
        "embeddings", "chat_completions", "demo-embed", 200, 1)
    assert answered.usage is not None and (answered.usage.input_tokens, answered.usage.output_tokens) == (3, 0)
    assert [(r.endpoint, r.client_protocol, r.status) for r in refused] == [("embeddings", "chat_completions", 401),
                                                                          ("embeddings", "gemini", 401)]

