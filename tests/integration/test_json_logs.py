"""`logging.format: json` through a live server with two workers: every line the server writes —
gunicorn's own, the proxy's, warnings — is one JSON object with an ISO time; each attempt and each
access line carries the request id, the client key's name, upstream, account, model, status, class
or outcome, timings and tokens; no key appears. And the default text lines read as they always did."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

from openai import APIStatusError, OpenAI

from proxy.blueprints.auth import key_name
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.integration.test_metrics import FLAKY, SECRETS, STEADY, get, metrics_config
from tests.integration.test_pool_shared_state import eventually
from tests.wire import request

ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def client(proxy: ProxyServer, request_id: str) -> OpenAI:
    return OpenAI(base_url=f"{proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20,
                  default_headers={"X-Request-Id": request_id})


def rid() -> str:
    return "json-" + uuid.uuid4().hex


def test_every_line_is_json_and_attempts_and_accesses_say_what_happened(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    config = metrics_config(demo_upstream, logging={"format": "json"})
    config["upstreams"][0]["protocol"] = "openai"  # a deprecated name: one warning, from the master (workers get its checked config)
    server = start_proxy(config, tmp_path, workers=2)
    whole_id, stream_id, failover_id, failed_id = rid(), rid(), rid(), rid()
    try:
        whole = client(server, whole_id).chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=3] [demo:pace=0]"}])
        chunks = list(client(server, stream_id).chat.completions.create(
            model="demo-model", stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "hi [demo:words=4] [demo:pace=0] [demo:reasoning]"}]))
        demo_upstream.control("/_demo/keys", body={FLAKY: {"status": 429, "times": 1}})
        try:
            client(server, failover_id).chat.completions.create(
                model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
        finally:
            demo_upstream.control("/_demo/keys", method="DELETE")
        try:  # an upstream 500: answered as such, and logged as a warning
            client(server, failed_id).chat.completions.create(
                model="demo-model", messages=[{"role": "user", "content": "[demo:status=500]"}])
        except APIStatusError as exc:
            assert exc.status_code == 500
        translated_id = rid()  # the same, re-expressed for a Messages client: the proxy logs a warning
        answered = request(server.url, "POST", "/v1/messages", {
            "model": "demo-model", "max_tokens": 50, "messages": [{"role": "user", "content": "[demo:status=500]"}]},
            {"x-api-key": CLIENT_KEY, "X-Request-Id": translated_id, "anthropic-version": "2023-06-01"})
        assert answered.status == 500
        answered.close()
        bad = request(server.url, "POST", "/v1/chat/completions", {"model": "demo-model"},
                      {"Authorization": f"Bearer {CLIENT_KEY}"})
        assert bad.status == 400
        bad.close()
        assert get(server, "/metrics")[0] == 200
        assert get(server, "/nowhere", CLIENT_KEY)[0] == 404
        # The stream's access line is written when its record closes, just after its last byte.
        assert eventually(lambda: f'"request_id": "{stream_id}"' in server.log() and '"event": "access"'
                          in [ln for ln in server.log().splitlines() if stream_id in ln][-1])
    finally:
        stop_proxy(server)

    log = server.log()
    for secret in SECRETS:
        assert secret not in log
    lines = [json.loads(line) for line in log.splitlines()]  # every line parses
    assert lines and all(isinstance(line, dict) and ISO_TIME.match(line["time"]) and line["msg"] for line in lines)
    assert any(line["logger"] == "gunicorn.error" and line["msg"].startswith("Starting gunicorn") for line in lines)
    assert any(line["logger"] == "gunicorn.error" and "Shutting down" in line["msg"] for line in lines)
    (startup,) = [line for line in lines if line.get("event") == "startup"]  # the summary, as one object
    assert startup["summary"].startswith("llm-proxy ") and startup["upstreams"].startswith("main (chat_completions")
    warnings = [line for line in lines if line["level"] == "warning"]
    assert any(line.get("request_id") == translated_id and "answering 500" in line["msg"] for line in warnings)
    assert len([line for line in warnings if "'openai' is deprecated" in line["msg"]]) == 1  # the master's, once

    def events(kind: str, request_id: str) -> list[dict[str, Any]]:
        return [line for line in lines if line.get("event") == kind and line["request_id"] == request_id]

    who = {"client_key": key_name(CLIENT_KEY), "client_protocol": "chat_completions", "model": "demo-model",
           "upstream": "main", "upstream_model": "demo-model"}
    first, second = events("attempt", failover_id)
    assert {k: first[k] for k in who} == who and {k: second[k] for k in who} == who
    assert (first["account"], first["status"], first["class"], first["action"]) == ("flaky", 429, "exhausted", "cool")
    assert (second["account"], second["status"], second["class"], second["action"]) == ("steady", 200, "ok", "return")
    assert all(isinstance(a["elapsed_ms"], float) for a in (first, second))

    (access,) = events("access", whole_id)
    assert whole.usage is not None
    assert {k: access[k] for k in who} == who
    assert (access["method"], access["path"], access["status"], access["outcome"], access["stream"]) == (
        "POST", "/v1/chat/completions", 200, "ok", False)
    assert (access["input_tokens"], access["output_tokens"]) == (whole.usage.prompt_tokens,
                                                                 whole.usage.completion_tokens)
    assert access["first_byte_ms"] > 0 and access["duration_ms"] >= access["first_byte_ms"]
    assert access["elapsed_ms"] > 0 and access["bytes"] > 0 and access["attempts"] == 1
    assert access["endpoint"] == "chat_completions" and "served_model" not in access  # no fallback served

    (streamed,) = events("access", stream_id)
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert (streamed["stream"], streamed["outcome"], streamed["input_tokens"], streamed["output_tokens"],
            streamed["reasoning_tokens"]) == (True, "ok", usage.prompt_tokens, usage.completion_tokens,
                                              usage.completion_tokens_details.reasoning_tokens)
    assert streamed["reasoning_tokens"] > 0

    (failover,) = events("access", failover_id)
    assert (failover["account"], failover["attempts"], failover["outcome"]) == ("steady", 2, "ok")
    (failed,) = events("access", failed_id)
    assert (failed["status"], failed["outcome"], failed["input_tokens"]) == (500, "api_error", None)
    assert [a["class"] for a in events("attempt", failed_id)] == ["other"]


def test_the_text_format_is_unchanged(proxy: ProxyServer) -> None:
    request_id = rid()
    OpenAI(base_url=f"{proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20,
           default_headers={"X-Request-Id": request_id}).chat.completions.create(
        model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
    assert eventually(lambda: f"rid={request_id} ua=" in proxy.log())
    mine = [line for line in proxy.log().splitlines() if request_id in line]
    assert len(mine) == 2
    assert re.fullmatch(rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} INFO \[{request_id}\] proxy\.relay: attempt "
                        rf"rid={request_id} upstream=main account=acct-\d status=200 class=ok action=return "
                        r"elapsed_ms=\d+", mine[0]), mine[0]
    assert re.fullmatch(rf'127\.0\.0\.1 "POST /v1/chat/completions HTTP/1\.1" 200 \d+ \d+ms key={key_name(CLIENT_KEY)} rid={request_id} '
                        r'ua="OpenAI/Python [^"]+"', mine[1]), mine[1]
    assert STEADY not in proxy.log()
