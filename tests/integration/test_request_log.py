"""The request log (`request_log:`) through live gunicorn + gevent servers: a translated tool-call
stream kept with its four bodies byte for byte — the upstream's raw SSE equal to what the scripted
upstream sent, the client's equal to what the Anthropic SDK received —, a retried request with both
attempts, truncation at `max_body_bytes`, the size bound holding under a burst (oldest dropped
first, counted), no secret in any stored byte, the choice of keys and the sample, a viewer seeing
metadata only, the listing's filters and `has_body`, the export command, and two hosts on one Redis
seeing one log."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.conftest import CLIENT_KEY, UPSTREAM_KEYS, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.wire import request

pytestmark = pytest.mark.live

ADMIN_KEY = "sk-admin-reqlog-0123456789"
VIEWER_KEY = "sk-viewer-reqlog-0123456789"
TEAM_KEY = {"name": "team-a", "key": "sk-team-a-secret-0123456789"}
OTHER_KEY = {"name": "other", "key": "sk-other-secret-0123456789"}
ADMINS = [{"name": "ops", "key": ADMIN_KEY}, {"name": "watcher", "key": VIEWER_KEY, "role": "viewer"}]


def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> str:
    doc: dict[str, Any] = {"id": "chatcmpl-log", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        doc["usage"] = usage
    return "data: " + json.dumps(doc) + "\n\n"


TOOL_STREAM = [
    chunk({"role": "assistant", "content": "Checking."}),
    chunk({"tool_calls": [{"index": 0, "id": "call_w1", "type": "function",
                           "function": {"name": "weather", "arguments": ""}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    chunk({}, "tool_calls", {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}),
    "data: [DONE]\n\n",
]


def admin_get(proxy: ProxyServer, path: str, key: str = ADMIN_KEY) -> tuple[int, bytes, str]:
    resp = request(proxy.url, "GET", path, headers={"Authorization": f"Bearer {key}"})
    out = resp.status, resp.body(), resp.headers.get("content-type", "")
    resp.close()
    return out


def detail(proxy: ProxyServer, rid: str, key: str = ADMIN_KEY) -> dict[str, Any]:
    status, body, _ = admin_get(proxy, f"/admin/requests/{rid}", key)
    assert status == 200, body
    return json.loads(body)


def part(proxy: ProxyServer, rid: str, name: str, attempt: int | None = None) -> bytes:
    query = f"?part={name}" + (f"&attempt={attempt}" if attempt else "")
    status, body, _ = admin_get(proxy, f"/admin/requests/{rid}{query}")
    assert status == 200, body
    return body


@pytest.fixture(scope="module")
def logged(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    config = base_config(demo_upstream.url, client_keys=[CLIENT_KEY, TEAM_KEY, OTHER_KEY], admin_keys=ADMINS,
                         request_log={"enabled": True, "keys": ["key-*", "team-*"], "max_body_bytes": 4096,
                                      "redact": ["$.metadata.user_id", "hunter[0-9]+"]})
    config["upstreams"][0]["pool"] = {"probe": {"interval": 3600}}
    server = start_proxy(config, tmp_path_factory.mktemp("request-log"))
    yield server
    stop_proxy(server)
    demo_upstream.control("/_demo/keys", method="DELETE")


def test_a_translated_tool_call_stream_is_kept_with_its_four_bodies_byte_for_byte(
        logged: ProxyServer, demo_upstream: DemoUpstream) -> None:
    rid = f"req_log_{uuid.uuid4().hex[:12]}"
    demo_upstream.control(f"/_demo/script?request_id={rid}", body=[{"steps": [{"send": c} for c in TOOL_STREAM]}])
    client = Anthropic(base_url=logged.url, api_key=CLIENT_KEY, max_retries=0)
    params: dict[str, Any] = {
        "model": "gpt-4o", "max_tokens": 100, "stream": True,
        "messages": [{"role": "user", "content": "Weather in Paris? My password is hunter22."}],
        "tools": [{"name": "weather", "description": "Weather of a city",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "metadata": {"user_id": "customer-42"}}
    with client.messages.with_streaming_response.create(**params, extra_headers={"x-request-id": rid}) as resp:
        received = b"".join(resp.iter_bytes())
    assert b'"partial_json"' in received and b"message_stop" in received  # a real translated tool-call stream

    entry = detail(logged, rid)
    assert entry["has_body"] is True and entry["bodies_withheld"] is False
    assert entry["logged_because"] == "sampled" and entry["stream"] is True and entry["status"] == 200
    # What reached the upstream, as the upstream saw it, and what it sent, byte for byte.
    (seen,) = demo_upstream.requests(rid)
    assert json.loads(part(logged, rid, "upstream_request")) == \
        json.loads(json.dumps(seen["body"]).replace("hunter22", "[redacted]"))  # `redact` applies to every body
    assert part(logged, rid, "upstream_response") == "".join(TOOL_STREAM).encode()
    assert part(logged, rid, "client_response") == received
    # The client's request as sent, with what `redact` names replaced.
    sent = json.loads(part(logged, rid, "client_request"))
    assert sent["metadata"]["user_id"] == "[redacted]"
    assert sent["messages"][0]["content"] == "Weather in Paris? My password is [redacted]."
    assert sent["tools"] == params["tools"]
    (attempt,) = entry["attempts"]
    assert attempt["status"] == 200 and attempt["class"] == "ok" and attempt["action"] == "stream"
    assert attempt["url"].endswith("/v1/chat/completions") and attempt["upstream"] == "main"
    chunks = attempt["response"]["chunks"]
    assert chunks[-1][1] == len("".join(TOOL_STREAM).encode())  # the pieces cover the whole body
    assert [t for t, _ in chunks] == sorted(t for t, _ in chunks)
    client_chunks = entry["client_response"]["body"]["chunks"]
    assert len(client_chunks) >= 5 and client_chunks[-1][1] == len(received)
    headers = entry["client_request"]["headers"]
    carried = [headers[h] for h in ("x-api-key", "authorization") if h in headers]  # wherever the SDK put the key
    assert carried == ["[redacted]"] and headers["content-type"] == "application/json", headers


def test_a_retried_request_shows_both_attempts(logged: ProxyServer, demo_upstream: DemoUpstream) -> None:
    rid = f"req_log_{uuid.uuid4().hex[:12]}"
    demo_upstream.control("/_demo/keys", body={UPSTREAM_KEYS[0]: {
        "status": 429, "body": {"error": {"message": "slow down", "type": "rate_limit_error"}},
        "headers": {"Retry-After": "1"}, "times": 1}})
    client = OpenAI(base_url=f"{logged.url}/v1", api_key=CLIENT_KEY, max_retries=0)
    # Either account may be leased first: the failure is scripted on the first one's key only.
    for _ in range(2):
        answer = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                                extra_headers={"x-request-id": rid})
        assert answer.choices[0].message.content
        if detail(logged, rid)["attempts"] and len(detail(logged, rid)["attempts"]) == 2:
            break
        rid = f"req_log_{uuid.uuid4().hex[:12]}"
    entry = detail(logged, rid)
    first, second = entry["attempts"]
    assert (first["number"], first["status"]) == (1, 429) and first["class"] in ("rate_limited", "exhausted")
    assert (second["number"], second["status"], second["class"]) == (2, 200, "ok")
    assert first["account"] != second["account"]
    assert b"slow down" in part(logged, rid, "upstream_response", attempt=1)
    assert json.loads(part(logged, rid, "upstream_response", attempt=2))["choices"]
    assert json.loads(part(logged, rid, "client_response"))["choices"][0]["message"]["content"] == \
        answer.choices[0].message.content


def test_a_body_over_max_body_bytes_is_truncated_with_its_size_kept(logged: ProxyServer) -> None:
    rid = f"req_log_{uuid.uuid4().hex[:12]}"
    prompt = "word " * 2000  # 10,000 bytes: over the 4096 kept
    client = OpenAI(base_url=f"{logged.url}/v1", api_key=CLIENT_KEY, max_retries=0)
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": prompt}],
                                   extra_headers={"x-request-id": rid})
    body = detail(logged, rid)["client_request"]["body"]
    assert body["truncated"] is True and body["stored"] == 4096 and body["size"] > 10000
    assert len(part(logged, rid, "client_request")) == 4096


def test_keys_outside_the_choice_are_not_kept_and_a_viewer_sees_no_body(logged: ProxyServer) -> None:
    kept, skipped = f"req_log_{uuid.uuid4().hex[:12]}", f"req_log_{uuid.uuid4().hex[:12]}"
    for key, rid in ((TEAM_KEY["key"], kept), (OTHER_KEY["key"], skipped)):
        OpenAI(base_url=f"{logged.url}/v1", api_key=key, max_retries=0).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hello"}], extra_headers={"x-request-id": rid})
    assert detail(logged, kept)["has_body"] is True
    assert detail(logged, skipped)["has_body"] is False  # listed among the recent requests, no bodies
    status, body, _ = admin_get(logged, f"/admin/requests/{skipped}?part=client_request")
    assert status == 404
    seen = detail(logged, kept, key=VIEWER_KEY)
    assert seen["bodies_withheld"] is True and seen["client_request"]["body"] is None
    assert seen["attempts"][0]["request"] is None and seen["client_response"]["body"] is None
    status, body, _ = admin_get(logged, f"/admin/requests/{kept}?part=client_request", key=VIEWER_KEY)
    assert status == 403 and b"admin keys only" in body
    # The listing: every request, `has_body` on each, and the filters.
    status, body, _ = admin_get(logged, "/admin/requests?key=team-*&has_body=1")
    listed = json.loads(body)["data"]
    assert status == 200 and {e["request_id"] for e in listed} >= {kept}
    assert all(e["client_key"] == "team-a" and e["has_body"] for e in listed)
    status, body, _ = admin_get(logged, "/admin/requests?key=other")
    assert [e["has_body"] for e in json.loads(body)["data"] if e["request_id"] == skipped] == [False]
    status, body, _ = admin_get(logged, "/admin/requests?status=2xx&model=gpt-4o&limit=5")
    assert status == 200 and all(str(e["status"]).startswith("2") for e in json.loads(body)["data"])
    status, body, _ = admin_get(logged, "/admin/requests?status=ok")
    assert status == 400 and b"4xx" in body


def test_no_secret_is_stored_anywhere(logged: ProxyServer) -> None:
    rid = f"req_log_{uuid.uuid4().hex[:12]}"
    client = OpenAI(base_url=f"{logged.url}/v1", api_key=CLIENT_KEY, max_retries=0)
    # The client's key, an upstream key and an admin key in the prompt: none may be kept.
    text = f"keys: {CLIENT_KEY} {UPSTREAM_KEYS[1]} {ADMIN_KEY} {TEAM_KEY['key']}"
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": text}],
                                   extra_headers={"x-request-id": rid})
    assert b"[redacted]" in part(logged, rid, "client_request")
    files = [p for p in Path(logged.log_path).parent.rglob("*") if p.is_file() and "requests.db" in p.name]
    assert files, "the request log's SQLite file (and its WAL) beside the state file"
    stored = b"".join(p.read_bytes() for p in files)
    assert rid.encode() in stored
    for secret in (CLIENT_KEY, *UPSTREAM_KEYS, ADMIN_KEY, VIEWER_KEY, TEAM_KEY["key"], OTHER_KEY["key"]):
        assert secret.encode() not in stored, secret


def test_the_export_writes_every_kept_request_as_json_lines(logged: ProxyServer) -> None:
    config = Path(logged.log_path).parent / "config.yaml"
    out = subprocess.run([sys.executable, "-m", "proxy.serving.cli", "requests", "export", "--config", str(config),
                          "--since", "2000-01-01"], capture_output=True, timeout=60, check=True)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines and all(e["has_body"] and e["client_request"]["body"]["data"] for e in lines)
    times = [e["time"] for e in lines]
    assert times == sorted(times)


def test_the_size_bound_holds_under_a_burst_dropping_the_oldest(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    config = base_config(demo_upstream.url, admin_keys=ADMINS,
                         request_log={"enabled": True, "max_total_mb": 0.05})  # 52,428 bytes
    server = start_proxy(config, tmp_path)
    try:
        client = OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0)
        rids = [f"req_burst_{i:03d}_{uuid.uuid4().hex[:6]}" for i in range(30)]
        for rid in rids:  # about 3 KB kept each: 30 of them are about 90 KB
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x" * 1000}],
                                           extra_headers={"x-request-id": rid})
        status, body, _ = admin_get(server, "/admin/requests?limit=100")
        assert status == 200, body
        answer = json.loads(body)
        kept = [rid for rid in rids if any(e["request_id"] == rid and e["has_body"] for e in answer["data"])]
        assert 0 < len(kept) < len(rids)
        assert kept == rids[len(rids) - len(kept):]  # the newest are kept: the oldest went first
        totals = answer["request_log"]
        assert totals["bytes"] <= 0.05 * 2**20 and totals["dropped"] == len(rids) - len(kept)
        assert "request log: on for keys *, sample 1 (failures: always); " in server.log()  # the startup summary
        _, scraped, _ = admin_get(server, "/metrics")
        assert f'llm_proxy_request_log_dropped_total{{reason="size_bound"}} {float(totals["dropped"])}'.encode() \
            in scraped
    finally:
        stop_proxy(server)


def test_retention_holds_under_a_burst(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    config = base_config(demo_upstream.url, admin_keys=ADMINS,
                         request_log={"enabled": True, "retention_hours": 0.0015})  # 5.4 s
    server = start_proxy(config, tmp_path)
    try:
        client = OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0)

        def burst(tag: str) -> list[str]:
            rids = [f"req_{tag}_{i:02d}_{uuid.uuid4().hex[:6]}" for i in range(10)]
            for rid in rids:
                client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": tag}],
                                               extra_headers={"x-request-id": rid})
            return rids

        first = burst("first")
        assert detail(server, first[-1])["has_body"] is True
        deadline = time.monotonic() + 15
        while detail(server, first[-1])["has_body"] and time.monotonic() < deadline:
            time.sleep(0.1)  # polling until the first burst is past retention, with a deadline
        second = burst("second")
        listed = json.loads(admin_get(server, "/admin/requests?limit=100")[1])
        kept = {e["request_id"] for e in listed["data"] if e["has_body"]}
        assert kept.isdisjoint(first) and set(second) <= kept
        assert listed["request_log"]["entries"] == len(second)  # the first burst purged, not only hidden
        assert listed["request_log"]["dropped"] == 0  # past retention is no drop for the size bound
    finally:
        stop_proxy(server)


def test_two_hosts_on_one_redis_see_one_log(demo_upstream: DemoUpstream, redis_url: str, tmp_path: Path) -> None:
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    servers = []
    try:
        for name in ("a", "b"):
            folder = tmp_path / name
            folder.mkdir()
            config = base_config(demo_upstream.url, admin_keys=ADMINS, request_log={"enabled": True},
                                 state={"backend": "redis", "url": redis_url, "prefix": prefix})
            servers.append(start_proxy(config, folder))
        rid = f"req_log_{uuid.uuid4().hex[:12]}"
        OpenAI(base_url=f"{servers[0].url}/v1", api_key=CLIENT_KEY, max_retries=0).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "from host a"}], extra_headers={"x-request-id": rid})
        # Asked on host b: host a's writer gathers for up to half a second before it writes (request_log.GATHER).
        deadline = time.monotonic() + 10
        while not (entry := detail(servers[1], rid))["has_body"] and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the other host's log with a deadline
        assert entry["has_body"] is True and "from host a" in entry["client_request"]["body"]["data"]
        assert json.loads(part(servers[1], rid, "client_response"))["choices"]
    finally:
        for server in servers:
            stop_proxy(server)


def test_outside_the_sample_only_failures_are_kept(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    config = base_config(demo_upstream.url, admin_keys=ADMINS,
                         request_log={"enabled": True, "sample": 0.0, "errors": "always"})
    server = start_proxy(config, tmp_path)
    try:
        client = OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0)
        ok, failed = f"req_log_{uuid.uuid4().hex[:12]}", f"req_log_{uuid.uuid4().hex[:12]}"
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "fine"}],
                                       extra_headers={"x-request-id": ok})
        with pytest.raises(openai.BadRequestError, match="messages"):
            client.chat.completions.create(model="gpt-4o", messages="lost",  # type: ignore[arg-type]
                                           extra_headers={"x-request-id": failed})
        assert detail(server, ok)["has_body"] is False
        entry = detail(server, failed)
        assert entry["has_body"] is True and entry["logged_because"] == "error" and entry["status"] == 400
        assert entry["attempts"] == [] and b"messages" in part(server, failed, "client_response")
        assert json.loads(part(server, failed, "client_request"))["messages"] == "lost"
    finally:
        stop_proxy(server)


def test_a_websocket_turn_is_kept_like_an_http_request(logged: ProxyServer, demo_upstream: DemoUpstream) -> None:
    from websockets.sync.client import connect

    socket_id = f"req_ws_{uuid.uuid4().hex[:10]}"
    url = logged.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": socket_id},
                 open_timeout=10) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "gpt-4o", "input": "over the socket"}))
        received = []
        while not received or json.loads(received[-1])["type"] not in ("response.completed", "response.failed"):
            received.append(ws.recv(timeout=20))
    entry = detail(logged, f"{socket_id}-1")  # each turn is a request: the socket's id and the turn's number
    assert entry["has_body"] is True and entry["client_request"]["method"] == "WEBSOCKET"
    assert json.loads(entry["client_request"]["body"]["data"])["input"] == "over the socket"
    sent = part(logged, f"{socket_id}-1", "client_response").decode()
    kept = entry["client_response"]["body"]
    assert kept["size"] >= sum(len(t) for t in received)  # every event the client got passed through the tap
    for text in received[:3]:  # the first of them, in the frames the proxy relayed (the rest past 4096 bytes)
        assert json.dumps(json.loads(text)["type"]) in sent
    assert entry["attempts"][0]["url"].endswith("/v1/chat/completions")
