"""What every client API has, for a Gemini client, through a live gunicorn + gevent proxy: named keys
and their model globs (403 PERMISSION_DENIED), limits (429 RESOURCE_EXHAUSTED), a budget told as a
spent daily quota, metrics by client protocol, and the first byte of a silent stream — a blank line,
since an SSE comment breaks both Gemini SDKs (docs/protocols.md §16.2)."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google import genai
from google.genai import types

from proxy.ir.response import ErrorInfo
from proxy.protocols.gemini.errors import error_body
from tests.conftest import DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.integration.upstreams import words
from tests.wire import request

OPEN, NARROW, LIMITED = "sk-gm-open-key-0001", "sk-gm-narrow-key-0002", "sk-gm-limited-key-0003"
TOTAL = 1.0  # timeouts.first_byte_total


@pytest.fixture(scope="module")
def ops_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    config: dict[str, Any] = {
        "client_keys": [{"name": "open", "key": OPEN}, {"name": "narrow", "key": NARROW, "models": ["allowed-*"]},
                        {"name": "limited", "key": LIMITED, "limits": {"requests_per_minute": 1}}],
        "metrics": {"public": True},
        "timeouts": {"first_byte": 5, "first_byte_total": TOTAL},
        "streaming": {"keepalive_interval": 0.1},
        "upstreams": [{"name": "main", "protocol": "chat_completions", "base_url": demo_upstream.url,
                       "accounts": [{"id": "a1", "api_key": "sk-up-1"}]}],
    }
    server = start_proxy(config, Path(tmp_path_factory.mktemp("gemini-ops")))
    yield server
    stop_proxy(server)


def call(proxy: ProxyServer, key: str, model: str, path_call: str = "generateContent",
         prompt: str = "hi [demo:words=2] [demo:pace=0]", headers: dict[str, str] | None = None) -> Any:
    body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
    return request(proxy.url, "POST", f"/v1beta/models/{model}:{path_call}", body,
                   headers={"x-goog-api-key": key, **(headers or {})})


def test_a_keys_model_globs_answer_in_geminis_words(ops_proxy: ProxyServer) -> None:
    assert call(ops_proxy, NARROW, "allowed-model").status == 200
    refused = call(ops_proxy, NARROW, "demo-model")
    error = refused.json()["error"]
    assert refused.status == 403 and error["status"] == "PERMISSION_DENIED" and error["code"] == 403
    assert "'narrow' may not use the model 'demo-model'" in error["message"]
    counted = call(ops_proxy, NARROW, "demo-model", "countTokens")
    assert counted.status == 403 and counted.json()["error"]["status"] == "PERMISSION_DENIED"


def test_a_keys_limit_is_resource_exhausted(ops_proxy: ProxyServer) -> None:
    assert call(ops_proxy, LIMITED, "demo-model").status == 200
    over = call(ops_proxy, LIMITED, "demo-model")
    error = over.json()["error"]
    assert over.status == 429 and error["status"] == "RESOURCE_EXHAUSTED" and over.headers.get("retry-after")


def test_a_spent_budget_reads_as_a_spent_daily_quota() -> None:
    """gemini-cli stops at once on a QuotaFailure whose quotaId says PerDay; any other 429 it retries
    for minutes (what a client key's spent budget must not cause)."""
    body = error_body(ErrorInfo("budget", "The key's budget of $1.00 per day is spent.", 429))
    assert body["error"]["code"] == 429 and body["error"]["status"] == "RESOURCE_EXHAUSTED"
    (detail,) = body["error"]["details"]
    assert detail["@type"].endswith("QuotaFailure") and "PerDay" in detail["violations"][0]["quotaId"]


def test_metrics_count_gemini_clients(ops_proxy: ProxyServer) -> None:
    assert call(ops_proxy, OPEN, "demo-model").status == 200
    with urllib.request.urlopen(f"{ops_proxy.url}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert any(line.startswith("llm_proxy_requests_total{") and 'client_protocol="gemini"' in line
               for line in text.splitlines())
    assert OPEN not in text


@pytest.mark.parametrize("sse", [True, False])
def test_a_silent_upstreams_first_byte_is_a_blank_line(ops_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                       sse: bool) -> None:
    request_id = "gm-" + uuid.uuid4().hex
    demo_upstream.control(f"/_demo/script?request_id={request_id}", body=[{"steps": [{"hold": True}]}])
    started = time.monotonic()
    resp = call(ops_proxy, OPEN, "demo-model", "streamGenerateContent" + ("?alt=sse" if sse else ""),
                headers={"X-Request-Id": request_id})
    first = resp.next_chunk()
    elapsed = time.monotonic() - started
    resp.close()
    assert resp.status == 200 and first == (b"\r\n" if sse else b"[\n")
    assert elapsed < TOTAL + 1.5  # keepalive_interval (0.1 s) comes first here: well before first_byte_total


def test_the_sdk_reads_a_stream_with_keepalives_between_its_chunks(ops_proxy: ProxyServer) -> None:
    """Chunks 300 ms apart with a keepalive every 100 ms: google-genai sees every chunk and nothing else."""
    gm = genai.Client(api_key=OPEN, http_options=types.HttpOptions(base_url=ops_proxy.url, timeout=20_000))
    chunks = list(gm.models.generate_content_stream(model="demo-model", contents="hi [demo:words=3] [demo:pace=300]"))
    assert "".join(c.text or "" for c in chunks) == words(3)
    assert all(c.candidates for c in chunks)
    raw = call(ops_proxy, OPEN, "demo-model", "streamGenerateContent?alt=sse",
               prompt="hi [demo:words=2] [demo:pace=300]").body()
    lines = raw.split(b"\r\n")
    assert lines.count(b"") > 2 * raw.count(b"data: ")  # blank lines went out between the events
    assert not any(line.startswith(b":") for line in lines)  # and never a comment line
    assert json.loads(raw.split(b"data: ")[-1].split(b"\r\n")[0])["candidates"][0]["finishReason"] == "STOP"
