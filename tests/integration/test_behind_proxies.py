"""The proxy deployed as people deploy it: behind nginx and behind Caddy (Debian's packages), each
run with the example config the deployment guide shows (docs/deploy/, tests/front_servers.py).

Through each: a stream's first event reaches the client while the upstream still holds the rest
(`[demo:hold]`: nothing more comes until the test releases it, so a buffering front would deliver
nothing at all), and paced deltas arrive spread over the upstream's pacing, not at once; the
Responses WebSocket upgrades and carries a turn; the access log (text and JSON lines) names the
client nginx or Caddy saw, from X-Forwarded-For, because the front's address is in
`server.forwarded_allow_ips` — and a client's own X-Forwarded-For hops are not believed. A proxy
that trusts no peer logs the front's address; one trusting the whole loopback net believes a hop
the client wrote. In every case the recent-requests list (`/admin/requests`) shows the request's
`client_address` as the same address the access log names.

The client connects from 127.0.0.2 (any 127/8 address is loopback on Linux), so that it is not the
default-trusted 127.0.0.1 the fronts connect from.
"""

from __future__ import annotations

import http.client
import itertools
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from tests import front_servers
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY
from tests.integration.test_pool_shared_state import eventually
from tests.integration.test_usage import listed

pytestmark = pytest.mark.live

CLIENT_ADDR = "127.0.0.2"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


@pytest.fixture(scope="module")
def deployed(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    server = start_proxy(config(demo_upstream), Path(tmp_path_factory.mktemp("deployed")))
    yield server
    stop_proxy(server)


def config(demo_upstream: DemoUpstream, **overrides: Any) -> dict[str, Any]:
    return base_config(demo_upstream.url, admin_keys=[ADMIN_KEY], **overrides)


def _address(proxy: ProxyServer) -> str:
    return proxy.url.removeprefix("http://")


@pytest.fixture(scope="module", params=["nginx", "caddy"])
def front(request: pytest.FixtureRequest, deployed: ProxyServer) -> Iterator[front_servers.FrontServer]:
    start = front_servers.start_nginx if request.param == "nginx" else front_servers.start_caddy
    server = start(_address(deployed))
    yield server
    server.stop()


def post(url: str, path: str, body: dict[str, Any], rid: str, **headers: str) -> http.client.HTTPResponse:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20, source_address=(CLIENT_ADDR, 0))
    conn.request("POST", path, body=json.dumps(body), headers={
        "Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json", "X-Request-Id": rid, **headers})
    return conn.getresponse()


def chunks(resp: http.client.HTTPResponse) -> Iterator[tuple[float, dict[str, Any]]]:
    """(arrival time, chunk) of each event of a Chat Completions stream, as it is read."""
    while line := resp.readline():
        if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
            yield time.monotonic(), json.loads(line[6:])


def deltas(resp: http.client.HTTPResponse) -> Iterator[tuple[float, str]]:
    """(arrival time, text) of each content delta of a Chat Completions stream, as it is read."""
    for arrived, chunk in chunks(resp):
        for choice in chunk.get("choices", []):
            if text := choice.get("delta", {}).get("content"):
                yield arrived, text


def stream_body(prompt: str) -> dict[str, Any]:
    return {"model": "demo-model", "stream": True, "messages": [{"role": "user", "content": prompt}]}


def test_the_first_event_arrives_while_the_upstream_holds_the_rest(front: front_servers.FrontServer,
                                                                    demo_upstream: DemoUpstream) -> None:
    rid = uuid.uuid4().hex
    resp = post(front.url, "/v1/chat/completions", stream_body("Hi [demo:words=5] [demo:hold] [demo:pace=0]"), rid)
    assert resp.status == 200
    events = chunks(resp)
    # The demo's first chunk (the assistant's role), relayed as it came; the upstream sends nothing
    # more until released, so a buffering front would hang here (and fail at the 20 s socket timeout).
    _, first = next(events)
    assert first["id"].startswith("chatcmpl-demo") and first["choices"][0]["delta"].get("role") == "assistant"
    demo_upstream.control(f"/_demo/release?request_id={rid}")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for _, c in events if c.get("choices"))
    assert len(text.split()) == 5


def test_paced_deltas_arrive_spread_as_the_upstream_paced_them(front: front_servers.FrontServer) -> None:
    pace = 0.25
    resp = post(front.url, "/v1/chat/completions", stream_body(f"Hi [demo:words=6] [demo:pace={pace * 1000:.0f}]"),
                uuid.uuid4().hex)
    arrivals = [t for t, _ in deltas(resp)]
    assert len(arrivals) >= 6
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    # Delivered as paced, each gap is about `pace` and the deltas span the upstream's pacing; a
    # buffering front would deliver them together, every gap ~0. (Compared to the pacing itself.)
    assert sum(gaps) > 0.5 * pace * len(gaps)
    # (Most gaps, not all: a loaded machine may hand the client two deltas in one read now and then.)
    assert sum(1 for g in gaps if g > pace / 2) >= len(gaps) / 2


def test_the_responses_websocket_upgrades_and_carries_a_turn(front: front_servers.FrontServer,
                                                             deployed: ProxyServer) -> None:
    rid = uuid.uuid4().hex
    url = front.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": rid},
                 open_timeout=10, source_address=(CLIENT_ADDR, 0)) as ws:
        assert ws.response.headers["x-request-id"] == rid
        ws.send(json.dumps({"type": "response.create", "model": "demo-model",
                            "input": "Say hello [demo:words=4] [demo:pace=0]"}))
        events = []
        while not events or events[-1]["type"] not in TERMINAL:
            events.append(json.loads(ws.recv(timeout=20)))
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert sum(e["type"] == "response.output_text.delta" for e in events) >= 4
    assert listed_address(deployed, f"{rid}-1") == CLIENT_ADDR  # the socket's first response


def access_line(proxy: ProxyServer, rid: str) -> str:
    def lines() -> list[str]:
        return [line for line in proxy.log().splitlines() if f" rid={rid} " in line and '"POST ' in line]

    assert eventually(lambda: bool(lines())), f"no access line for {rid}"
    return lines()[0]


def logged_client(front_url: str, proxy: ProxyServer, spoof: str | None = None) -> str:
    rid = uuid.uuid4().hex
    headers = {"X-Forwarded-For": spoof} if spoof else {}
    resp = post(front_url, "/v1/chat/completions", {"model": "demo-model", "messages": [
        {"role": "user", "content": "Hi [demo:words=2] [demo:pace=0]"}]}, rid, **headers)
    assert resp.status == 200, resp.read()
    resp.read()
    logged = access_line(proxy, rid).split(" ", 1)[0]
    assert listed_address(proxy, rid) == logged
    return logged


def listed_address(proxy: ProxyServer, rid: str) -> str | None:
    """The request's `client_address` in /admin/requests, once its entry is there."""
    assert eventually(lambda: listed(proxy, rid) is not None), f"{rid} not in /admin/requests"
    entry = listed(proxy, rid)
    assert entry is not None
    return entry["client_address"]


def test_the_access_log_names_the_client_the_front_saw(front: front_servers.FrontServer,
                                                       deployed: ProxyServer) -> None:
    assert logged_client(front.url, deployed) == CLIENT_ADDR
    # A hop the client wrote itself is left of the one the front appends (nginx) or dropped (Caddy).
    assert logged_client(front.url, deployed, spoof="203.0.113.66") == CLIENT_ADDR


def test_a_client_reaching_the_proxy_directly_cannot_claim_an_address(deployed: ProxyServer) -> None:
    assert logged_client(deployed.url, deployed, spoof="203.0.113.66") == CLIENT_ADDR


@pytest.mark.parametrize("allow, expected", [([], "127.0.0.1"), (["127.0.0.0/8"], "203.0.113.66")])
def test_forwarded_allow_ips_decides_whom_the_proxy_believes(allow: list[str], expected: str,
                                                             demo_upstream: DemoUpstream,
                                                             tmp_path: Path) -> None:
    """Trusting nobody: the log shows nginx's address. Trusting the whole loopback net, the client at
    127.0.0.2 is a trusted hop too, so the hop it wrote is believed — which is why the default
    trusts only 127.0.0.1 and ::1."""
    server = start_proxy(config(demo_upstream, server={"forwarded_allow_ips": allow}), tmp_path)
    nginx = front_servers.start_nginx(_address(server))
    try:
        assert logged_client(nginx.url, server, spoof="203.0.113.66") == expected
    finally:
        nginx.stop()
        stop_proxy(server)


def test_the_json_access_line_names_the_client_too(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(config(demo_upstream, logging={"format": "json"}), tmp_path)
    nginx = front_servers.start_nginx(_address(server))
    try:
        rid = uuid.uuid4().hex
        resp = post(nginx.url, "/v1/chat/completions", {"model": "demo-model", "messages": [
            {"role": "user", "content": "Hi [demo:words=2] [demo:pace=0]"}]}, rid, **{"X-Forwarded-For": "203.0.113.66"})
        assert resp.status == 200
        resp.read()

        def access() -> list[dict[str, Any]]:
            lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
            return [e for e in lines if e.get("event") == "access" and e.get("request_id") == rid]

        assert eventually(lambda: bool(access()))
        assert access()[0]["remote_addr"] == CLIENT_ADDR
        assert listed_address(server, rid) == CLIENT_ADDR
    finally:
        nginx.stop()
        stop_proxy(server)
