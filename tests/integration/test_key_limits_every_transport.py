"""A client key's limits hold on every way in to a completion, not only POST /v1/responses: the
Responses WebSocket and compaction (/v1/responses/compact) go through the same admission as HTTP —
the 429 in the protocol's shape with Retry-After, and nothing reaches the upstream."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from websockets.sync.client import connect

from tests.conftest import DemoUpstream, ProxyServer, start_proxy, stop_proxy

LIMITED = "sk-limited-one-a-minute"


@pytest.fixture(scope="module")
def limited(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    config = {"client_keys": [{"name": "one-a-minute", "key": LIMITED, "limits": {"requests_per_minute": 1}}],
              "upstreams": [{"name": "main", "protocol": "chat_completions", "base_url": demo_upstream.url,
                             "pool": {"probe": {"interval": 3600}},
                             "accounts": [{"id": "only", "api_key": "sk-limited-up"}]}]}
    server = start_proxy(config, Path(tmp_path_factory.mktemp("limited")))
    yield server
    stop_proxy(server)


def body(text: str) -> dict[str, object]:
    return {"model": "demo-model", "input": [{"role": "user", "content": f"{text} [demo:words=2] [demo:pace=0]"}]}


def test_the_websocket_and_compaction_are_held_to_the_keys_limit(limited: ProxyServer,
                                                                 demo_upstream: DemoUpstream) -> None:
    rid = uuid.uuid4().hex
    url = limited.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"Authorization": f"Bearer {LIMITED}", "X-Request-Id": rid},
                 open_timeout=10) as ws:
        events = []
        for _ in range(2):  # the first is the minute's one request, the second is over the limit
            ws.send(json.dumps({"type": "response.create", **body("hi")}))
            while True:
                event = json.loads(ws.recv(timeout=20))
                events.append(event)
                if event["type"] in ("response.completed", "response.failed", "error"):
                    break
    assert [e["type"] for e in events if e["type"] in ("response.completed", "error")] == ["response.completed",
                                                                                          "error"]
    error = events[-1]
    headers = {name.lower(): value for name, value in error["headers"].items()}
    assert error["status"] == 429 and int(headers["retry-after"]) >= 1
    assert "one-a-minute" in error["error"]["message"] and "requests_per_minute" in error["error"]["message"]
    assert len(demo_upstream.requests(f"{rid}-1")) == 1 and demo_upstream.requests(f"{rid}-2") == []

    compact_id = uuid.uuid4().hex
    resp = requests.post(f"{limited.url}/v1/responses/compact", json=body("compact this"), timeout=20,
                         headers={"Authorization": f"Bearer {LIMITED}", "X-Request-Id": compact_id})
    assert resp.status_code == 429 and int(resp.headers["Retry-After"]) >= 1
    assert "requests_per_minute" in resp.json()["error"]["message"]
    assert demo_upstream.requests(compact_id) == []  # refused before any upstream
