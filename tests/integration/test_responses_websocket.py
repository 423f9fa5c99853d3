"""GET /v1/responses as a WebSocket, with a real client library (`websockets`) against a live
gunicorn + gevent proxy in front of the demo upstream: the events a socket carries are the SSE
stream's, one per frame; turns chain by previous_response_id; warm-ups; errors before the first
event as error frames with the HTTP path's status, failures after it in-band; a client that closes
frees the upstream and the account; many sockets through one worker; stored responses."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import websockets
from websockets.sync.client import ClientConnection, connect

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY, account, admin
from tests.integration.test_pool_shared_state import eventually
from tests.integration.test_reload import rewrite

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
SHELL_TOOL = {"type": "function", "name": "shell", "description": "run a command", "strict": False,
              "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}


@pytest.fixture(scope="module")
def ws_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    """One account (to read its books), upstream 429s answered as 429 (a rule), default keepalives (10 s)."""
    config = {"client_keys": [CLIENT_KEY], "admin_keys": [ADMIN_KEY],
              "upstreams": [{"name": "main", "protocol": "chat_completions", "base_url": demo_upstream.url,
                             "pool": {"probe": {"interval": 3600},
                                      "rules": [{"status": 429, "class": "exhausted", "action": "fail"}]},
                             "accounts": [{"id": "only", "api_key": "sk-ws-test"}]}]}
    server = start_proxy(config, Path(tmp_path_factory.mktemp("websocket")))
    yield server
    stop_proxy(server)


def ws_url(proxy: ProxyServer) -> str:
    return proxy.url.replace("http://", "ws://") + "/v1/responses"


def open_socket(proxy: ProxyServer, rid: str, **headers: str) -> ClientConnection:
    return connect(ws_url(proxy), additional_headers={"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": rid,
                                                      **headers}, open_timeout=10)


def create(ws: ClientConnection, **body: Any) -> list[dict[str, Any]]:
    """Send one response.create and read its events up to the terminal one (or an error frame)."""
    ws.send(json.dumps({"type": "response.create", **body}))
    events = []
    while True:
        event = json.loads(ws.recv(timeout=20))
        events.append(event)
        if event["type"] in TERMINAL or (event["type"] == "error" and "status" in event):
            return events


def sse_events(proxy: ProxyServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    resp = requests.post(f"{proxy.url}/v1/responses", json={**body, "stream": True}, timeout=20,
                         headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert resp.status_code == 200
    return [json.loads(line[6:]) for line in resp.text.splitlines() if line.startswith("data: ")]


def test_a_response_arrives_as_the_sse_streams_events_one_per_frame(ws_proxy: ProxyServer,
                                                                    demo_upstream: DemoUpstream) -> None:
    before = account(ws_proxy, "main", "only")
    rid = uuid.uuid4().hex
    body = {"model": "demo-model", "input": "Say hello [demo:words=6] [demo:pace=0]"}
    with open_socket(ws_proxy, rid, **{"x-codex-turn-state": "ts-1"}) as ws:
        headers = ws.response.headers
        assert headers["x-request-id"] == rid and headers["x-codex-turn-state"] == "ts-1"
        assert "permessage-deflate" in headers.get("sec-websocket-extensions", "")  # offered by the client
        events = create(ws, **body)
    over_http = sse_events(ws_proxy, body)
    assert [e["type"] for e in events] == [e["type"] for e in over_http]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and final["output"][0]["content"][0]["text"].startswith("Hello")
    (sent,) = demo_upstream.requests(f"{rid}-1")  # each response of a socket is one request to the upstream
    assert sent["body"]["messages"][-1]["content"].startswith("Say hello")
    # The pool's books, as for an HTTP stream: the request, and the usage the client was told.
    usage = final["usage"]
    assert eventually(lambda: account(ws_proxy, "main", "only")["requests"] == before["requests"] + 2)  # + the SSE one
    after = account(ws_proxy, "main", "only")
    assert after["tokens_in"] - before["tokens_in"] == 2 * usage["input_tokens"]
    assert after["tokens_out"] - before["tokens_out"] == 2 * usage["output_tokens"]


def test_a_tool_round_trip_over_two_frames_chained_by_previous_response_id(ws_proxy: ProxyServer,
                                                                           demo_upstream: DemoUpstream) -> None:
    rid = uuid.uuid4().hex
    with open_socket(ws_proxy, rid) as ws:
        first = create(ws, model="demo-model", input="List files [demo:tool] [demo:pace=0]", tools=[SHELL_TOOL],
                       store=False, instructions="You are a shell helper.")
        (call,) = [e["item"] for e in first if e["type"] == "response.output_item.done"
                   and e["item"]["type"] == "function_call"]
        second = create(ws, model="demo-model", tools=[SHELL_TOOL], store=False, instructions="You are a shell helper.",
                        previous_response_id=first[-1]["response"]["id"],
                        input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "a.txt b.txt"}])
    assert second[-1]["type"] == "response.completed"
    assert second[-1]["response"]["previous_response_id"] == first[-1]["response"]["id"]
    # The upstream saw the whole conversation: the instructions, the user's turn, the call and its output.
    (sent,) = demo_upstream.requests(f"{rid}-2")
    messages = sent["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[2]["tool_calls"][0]["id"] == call["call_id"] and messages[3]["content"] == "a.txt b.txt"


def test_a_generate_false_warm_up_answers_without_the_upstream_and_the_next_turn_chains_on_it(
        ws_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    rid = uuid.uuid4().hex
    with open_socket(ws_proxy, rid) as ws:
        warm = create(ws, model="demo-model", instructions="Be brief.", input=[], store=False, generate=False)
        assert [e["type"] for e in warm] == ["response.created", "response.completed"]
        assert warm[-1]["response"]["output"] == [] and warm[-1]["response"]["status"] == "completed"
        ws.send(json.dumps({"type": "response.processed", "response_id": warm[-1]["response"]["id"]}))  # no answer
        turn = create(ws, model="demo-model", store=False, previous_response_id=warm[-1]["response"]["id"],
                      instructions="Be brief.", input="hi [demo:words=2] [demo:pace=0]")
    assert turn[-1]["type"] == "response.completed"
    assert demo_upstream.requests(f"{rid}-1") == []  # the warm-up reached no upstream
    (sent,) = demo_upstream.requests(f"{rid}-2")
    assert sent["body"]["messages"][0] == {"role": "system", "content": "Be brief."}


def test_an_upstream_failure_mid_response_is_in_band_and_the_socket_carries_on(ws_proxy: ProxyServer) -> None:
    with open_socket(ws_proxy, uuid.uuid4().hex) as ws:
        failed = create(ws, model="demo-model", input="go [demo:fail-midstream] [demo:pace=0]")
        types = [e["type"] for e in failed]
        assert "response.output_text.delta" in types and types[-2:] == ["error", "response.failed"]
        assert "status" not in failed[-2]  # the in-band error of the stream, not an error frame
        again = create(ws, model="demo-model", input="hi [demo:words=2] [demo:pace=0]")
        assert again[-1]["type"] == "response.completed"


def test_an_error_before_the_first_event_is_an_error_frame_with_the_http_status(ws_proxy: ProxyServer) -> None:
    body = {"model": "demo-model", "input": "hi [demo:status=429]"}
    over_http = requests.post(f"{ws_proxy.url}/v1/responses", json={**body, "stream": True}, timeout=20,
                              headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    rid = uuid.uuid4().hex
    with open_socket(ws_proxy, rid) as ws:
        (frame,) = create(ws, **body)
        (invalid,) = create(ws, model="demo-model", input=17)
        assert create(ws, model="demo-model", input="hi [demo:words=2]")[-1]["type"] == "response.completed"
    assert over_http.status_code == 429
    assert frame["type"] == "error" and frame["status"] == 429
    assert frame["error"] == over_http.json()["error"] and frame["headers"]["x-request-id"] == f"{rid}-1"
    assert invalid["status"] == 400 and invalid["error"]["param"] == "input"


def test_a_plain_get_without_the_upgrade_is_not_a_socket(ws_proxy: ProxyServer) -> None:
    resp = requests.get(f"{ws_proxy.url}/v1/responses", headers={"Authorization": f"Bearer {CLIENT_KEY}"}, timeout=10)
    assert resp.status_code in (400, 405) and "error" in resp.json()


def test_the_upgrade_needs_the_client_key(ws_proxy: ProxyServer) -> None:
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        connect(ws_url(ws_proxy), additional_headers={"Authorization": "Bearer wrong"}, open_timeout=10)
    assert refused.value.response.status_code == 401


def test_upstream_silence_gets_keepalive_frames_and_the_idle_deadline(demo_upstream: DemoUpstream,
                                                                      tmp_path: Path) -> None:
    config = base_config(demo_upstream.url, streaming={"keepalive_interval": 0.4, "idle_timeout": 2})
    server = start_proxy(config, tmp_path)
    try:
        with open_socket(server, uuid.uuid4().hex) as ws:
            events = create(ws, model="demo-model", input="hi [demo:words=4] [demo:pace=0] [demo:pause=1.5]")
            silent = create(ws, model="demo-model", input="hi [demo:hold]")  # never released
    finally:
        stop_proxy(server)
    types = [e["type"] for e in events]
    assert types.count("response.in_progress") >= 2  # repeated during the upstream's pause
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    # Past streaming.idle_timeout the response ends in-band, as an SSE stream does.
    assert [e["type"] for e in silent][-2:] == ["error", "response.failed"]
    assert silent[-2]["error"]["message"] == "upstream sent nothing for 2s"


STAGES = {"waiting_for_the_upstream": "[demo:hang]", "mid_stream": "[demo:endless]",
          # the stream waits on a silent upstream, 10 s from its next keepalive: only the socket's
          # reader can tell it that the client left
          "during_a_keepalive_wait": "[demo:hold]"}


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_client_that_closes_frees_the_upstream_and_the_account(ws_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                                 stage: str) -> None:
    before = account(ws_proxy, "main", "only")
    rid = uuid.uuid4().hex
    directive = STAGES[stage]
    with open_socket(ws_proxy, rid) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "demo-model", "input": f"go {directive}"}))
        if stage != "waiting_for_the_upstream":
            assert json.loads(ws.recv(timeout=10))["type"] == "response.created"
        assert eventually(lambda: bool(demo_upstream.requests(f"{rid}-1")))
    closed = time.monotonic()
    assert demo_upstream.control(f"/_demo/wait?request_id={rid}-1&timeout=5", method="GET")["disconnected"]
    assert time.monotonic() - closed < 1.0
    assert eventually(lambda: account(ws_proxy, "main", "only")["in_flight"] == 0)
    after = account(ws_proxy, "main", "only")
    assert after["failures"].get("client_gone", 0) == before["failures"].get("client_gone", 0) + 1


def test_responses_made_over_a_socket_are_stored_for_http_and_other_sockets(ws_proxy: ProxyServer) -> None:
    auth = {"Authorization": f"Bearer {CLIENT_KEY}"}
    with open_socket(ws_proxy, uuid.uuid4().hex) as ws:
        kept = create(ws, model="demo-model", input="hi [demo:words=2] [demo:pace=0]")[-1]["response"]
        unstored = create(ws, model="demo-model", store=False, input="hi [demo:words=2]")[-1]["response"]
    got = requests.get(f"{ws_proxy.url}/v1/responses/{kept['id']}", headers=auth, timeout=10)
    assert got.status_code == 200 and got.json()["output"] == kept["output"]
    items = requests.get(f"{ws_proxy.url}/v1/responses/{kept['id']}/input_items", headers=auth, timeout=10).json()
    assert items["data"][0]["content"][0]["text"] == "hi [demo:words=2] [demo:pace=0]"
    # store: false is kept only for chaining (as the real API), which works from another connection.
    assert requests.get(f"{ws_proxy.url}/v1/responses/{unstored['id']}", headers=auth, timeout=10).status_code == 404
    with open_socket(ws_proxy, uuid.uuid4().hex) as other:
        chained = create(other, model="demo-model", previous_response_id=unstored["id"], input="more [demo:words=2]")
    assert chained[-1]["type"] == "response.completed"


def test_two_hundred_sockets_at_once_through_one_worker(ws_proxy: ProxyServer) -> None:
    async def one(i: int) -> str:
        async with websockets.connect(ws_url(ws_proxy), additional_headers={"Authorization": f"Bearer {CLIENT_KEY}"},
                                      open_timeout=30, max_queue=None) as ws:
            await ws.send(json.dumps({"type": "response.create", "model": "demo-model",
                                      "input": f"socket {i} [demo:words=20] [demo:pace=20]"}))
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 60))
                if event["type"] in TERMINAL or event["type"] == "error":
                    return str(event["type"])

    async def all_of_them() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(200)))

    assert asyncio.run(all_of_them()) == ["response.completed"] * 200


def test_a_graceful_stop_sends_socket_clients_away_after_their_response(demo_upstream: DemoUpstream,
                                                                        tmp_path: Path) -> None:
    server = start_proxy(base_config(demo_upstream.url), tmp_path)
    try:
        with open_socket(server, uuid.uuid4().hex) as idle, open_socket(server, uuid.uuid4().hex) as busy:
            assert create(idle, model="demo-model", input="hi [demo:words=2] [demo:pace=0]")[-1]["type"] == \
                "response.completed"
            busy.send(json.dumps({"type": "response.create", "model": "demo-model",
                                  "input": "a longer answer [demo:words=30] [demo:pace=40]"}))
            assert json.loads(busy.recv(timeout=10))["type"] == "response.created"
            stopping = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            with pytest.raises(websockets.exceptions.ConnectionClosed) as idle_closed:
                idle.recv(timeout=10)
            events = []
            with pytest.raises(websockets.exceptions.ConnectionClosed) as busy_closed:
                while True:
                    events.append(json.loads(busy.recv(timeout=10)))
        assert idle_closed.value.rcvd is not None and idle_closed.value.rcvd.code == 1001
        # The response in progress finished first, then its socket went away too.
        assert events[-1]["type"] == "response.completed"
        assert busy_closed.value.rcvd is not None and busy_closed.value.rcvd.code == 1001
        server.process.wait(timeout=30)
        assert time.monotonic() - stopping < 15  # not held until graceful_timeout (60 s)
    finally:
        stop_proxy(server)


def test_each_response_on_a_socket_is_checked_against_the_config_in_force(demo_upstream: DemoUpstream,
                                                                          tmp_path: Path) -> None:
    """A socket outlives config reloads: each response.create is judged like a new HTTP request —
    its key's models, the key itself — and compaction.key, which every worker must share, cannot
    change on a reload."""
    codex_key = "sk-ws-reload-codex"
    config = {"client_keys": [CLIENT_KEY, {"name": "codex", "key": codex_key}], "admin_keys": [ADMIN_KEY],
              "compaction": {"key": "k" * 40},
              "upstreams": [{"name": "main", "protocol": "chat_completions", "base_url": demo_upstream.url,
                             "accounts": [{"id": "only", "api_key": "sk-ws-reload-up"}]}]}
    server = start_proxy(config, tmp_path)
    try:
        with connect(ws_url(server), additional_headers={"Authorization": f"Bearer {codex_key}"},
                     open_timeout=10) as ws:
            assert create(ws, model="demo-model", input="hi [demo:words=2]")[-1]["type"] == "response.completed"
            config["client_keys"][1]["models"] = ["other-*"]
            rewrite(server, config)
            assert admin(server, "POST", "/admin/reload")[0] == 200
            (refused,) = create(ws, model="demo-model", input="hi")
            assert refused["status"] == 403 and refused["error"]["code"] == "model_not_allowed"
            config["client_keys"] = [CLIENT_KEY]
            rewrite(server, config)
            assert admin(server, "POST", "/admin/reload")[0] == 200
            (gone,) = create(ws, model="demo-model", input="hi")
            assert gone["status"] == 401
            with pytest.raises(websockets.exceptions.ConnectionClosed):
                ws.recv(timeout=10)  # and the socket is closed
        rewrite(server, {**config, "compaction": {"key": "j" * 40}})
        status, body = admin(server, "POST", "/admin/reload")
        assert status == 400 and "compaction.key: cannot change on a reload" in body["error"]["message"]
        assert "j" * 40 not in body["error"]["message"]
    finally:
        stop_proxy(server)


def recent(proxy: ProxyServer) -> dict[str, dict[str, Any]]:
    """/admin/requests — the record each request ended in, as the hooks got it — by request id."""
    status, body = admin(proxy, "GET", "/admin/requests")
    assert status == 200
    return {entry["request_id"]: entry for entry in body["data"]}


def test_each_response_on_a_socket_ends_in_one_record_as_over_http(ws_proxy: ProxyServer) -> None:
    rid = uuid.uuid4().hex
    with open_socket(ws_proxy, rid) as ws:
        completed = create(ws, model="demo-model", input="hi [demo:words=3] [demo:pace=0]")[-1]["response"]
        create(ws, model="demo-model", input=17)  # refused: 400
        create(ws, model="demo-model", store=False, input=[], generate=False)  # a warm-up
        failed = create(ws, model="demo-model", input="hi [demo:status=429]")  # the upstream's 429
    assert failed[-1]["status"] == 429
    entries = eventually(lambda: all(f"{rid}-{n}" in recent(ws_proxy) for n in (1, 2, 3, 4))) and recent(ws_proxy)
    assert entries, "a response on the socket left no record"
    one, refused, warm, limited = (entries[f"{rid}-{n}"] for n in (1, 2, 3, 4))
    assert (one["client_protocol"], one["model"], one["stream"], one["status"], one["outcome"]) == (
        "responses", "demo-model", True, 200, "ok")
    assert (one["upstream"], one["account"], one["attempts"]) == ("main", "only", 1)
    assert (one["input_tokens"], one["output_tokens"]) == (completed["usage"]["input_tokens"],
                                                           completed["usage"]["output_tokens"])
    assert one["first_byte_ms"] is not None and one["first_byte_ms"] <= one["duration_ms"]
    assert (refused["status"], refused["outcome"], refused["attempts"]) == (400, "invalid_request", 0)
    assert (warm["status"], warm["outcome"], warm["upstream"]) == (200, "ok", None)
    assert (limited["status"], limited["attempts"]) == (429, 1)
    assert sum(1 for key in recent(ws_proxy) if key.startswith(f"{rid}-")) == 4  # one record each, no more


@pytest.mark.parametrize(("headers", "status"), [
    ({"Upgrade": "websocket", "Connection": "Upgrade"}, 400),  # no Sec-WebSocket-Key / -Version
    ({"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
      "Sec-WebSocket-Version": "8"}, 426),  # a version this server does not speak
])
def test_a_broken_upgrade_is_answered_in_json(ws_proxy: ProxyServer, headers: dict[str, str], status: int) -> None:
    resp = requests.get(f"{ws_proxy.url}/v1/responses", timeout=10,
                        headers={"Authorization": f"Bearer {CLIENT_KEY}", **headers})
    assert resp.status_code == status
    assert "Not a valid WebSocket upgrade" in resp.json()["error"]["message"]
    if status == 426:
        assert resp.headers["Sec-WebSocket-Version"] == "13"
