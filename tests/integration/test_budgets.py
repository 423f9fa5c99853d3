"""USD budgets on live servers, as clients see them: a burst of 50 concurrent requests over four
workers (one state file) and over two hosts (one Redis) never takes a budget over — spent ≤ budget
whenever the store is read during the burst — and the requests refused are exactly those whose
worst case would have crossed it; spend is the sum of the requests' real costs and survives a
restart; the SDKs raise what a user expects (openai.RateLimitError `insufficient_quota` over Chat
and Responses, anthropic.BadRequestError); a group's budget holds across its keys; an unpriced
model is refused under a budget and served outside one; a store that does not answer refuses
budgeted requests only (503); a crossing of `alert_at` is POSTed to the webhook once.

The worst case is deterministic: every request of a burst has the same body (the request id rides
in a header), so the same estimate and cap; `[demo:hold]` keeps the admitted streams open until
the test releases them, so which requests are in flight when the others arrive is known."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import redis

from proxy.ir.tokens import estimate_input_tokens
from proxy.protocols import registry
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.redis_server import RedisServer
from tests.wire import RawResponse, request

ADMIN = "sk-admin-budgets"
TEAM, OTHER = "sk-team-budget-0123456789", "sk-other-budget-0123456789"
IN, OUT = 10, 20  # µ$ per token: USD 10 and 20 per million
PRICING = {"models": {"demo-*": {"input": IN, "output": OUT}}}
CAP = 50  # every burst request's max_tokens
BODY = {"model": "demo-model", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": CAP,
        "messages": [{"role": "user", "content": "spend [demo:hold] [demo:pace=0] [demo:words=5]"}]}


def worst_case(body: dict[str, Any], margin: float = 0.10) -> int:
    """What the proxy reserves for `body`, computed here from its estimate and the prices."""
    estimate = estimate_input_tokens(registry.get("chat_completions").client.decode_request(body))
    tokens = -(-estimate * int(100 * (1 + margin)) // 100)  # ceil(estimate x 1.1) in integers
    return tokens * IN + body["max_tokens"] * OUT


def config(demo: DemoUpstream, budget: dict[str, Any] | None, **top: Any) -> dict[str, Any]:
    keys: list[Any] = [CLIENT_KEY, {"name": "team-a", "key": TEAM, **({"budget": budget} if budget else {})},
                       {"name": "team-b", "key": OTHER}]
    return base_config(demo.url, client_keys=keys, admin_keys=[ADMIN], pricing=PRICING, **top)


def open_stream(proxy: ProxyServer, rid: str, key: str = TEAM, body: dict[str, Any] = BODY) -> RawResponse:
    resp = request(proxy.url, "POST", "/v1/chat/completions", body,
                   {"Authorization": f"Bearer {key}", "X-Request-Id": rid}, timeout=60)
    if resp.status == 200:
        resp.next_chunk()  # in flight: admitted, its first chunk out, held by the demo upstream
    return resp


def usage_cost(chunks: list[bytes]) -> int:
    """The cost of a finished stream, from the usage the client itself received."""
    for data in b"".join(chunks).split(b"\n\n"):
        if data.startswith(b"data: {") and b'"usage"' in data:
            usage = json.loads(data[6:])["usage"]
            if usage:
                return int(usage["prompt_tokens"]) * IN + int(usage["completion_tokens"]) * OUT
    raise AssertionError("no usage in the stream")


def refusal_figures(message: str) -> tuple[float, float, float, float]:
    """(budget, spent, reserved, this request's worst case) in USD, from a refusal's words."""
    found = re.search(r"budget \(\$([\d.]+) [^)]*\): \$([\d.]+) spent and \$([\d.]+) reserved by requests in "
                      r"flight, and this request may cost up to \$([\d.]+);", message)
    assert found, message
    budget, spent, reserved, cost = (float(x) for x in found.groups())
    return budget, spent, reserved, cost


def admin_keys(proxy: ProxyServer) -> dict[str, Any]:
    resp = request(proxy.url, "GET", "/admin/keys", headers={"Authorization": f"Bearer {ADMIN}"})
    doc = resp.json()
    resp.close()
    return doc


def held_burst(servers: list[ProxyServer], demo: DemoUpstream, n: int, budget: int,
               read_store: Callable[[], tuple[int, int]]) -> None:
    """`n` held streams at once: exactly budget // worst case are let in; then released."""
    ids = [f"budget-{uuid.uuid4().hex}" for _ in range(n)]
    with ThreadPoolExecutor(n) as pool:
        opened = list(pool.map(lambda i: open_stream(servers[i % len(servers)], ids[i]), range(n)))
    worst = worst_case(BODY)
    admitted = [r for r in opened if r.status == 200]
    assert len(admitted) == budget // worst, [r.status for r in opened]
    assert read_store() == (0, len(admitted) * worst)  # nothing spent yet; every worst case held
    for rid, resp in zip(ids, opened, strict=True):
        if resp.status == 200:
            continue
        assert resp.status == 429 and demo.requests(rid) == []  # refused before any upstream
        error = resp.json()["error"]
        assert (error["type"], error["code"]) == ("insufficient_quota", "insufficient_quota")
        limit, spent, reserved, cost = refusal_figures(error["message"])
        assert round(cost * 1e6) == worst and round((spent + reserved + cost) * 1e6) > budget == round(limit * 1e6)
        assert error["message"].startswith("The API key 'team-a' would go over its usd_total budget")
        resp.close()
    with ThreadPoolExecutor(n) as pool:
        list(pool.map(lambda rid: demo.control(f"/_demo/release?request_id={rid}"), ids))
    costs = [usage_cost(r.rest()) for r in admitted]
    for resp in admitted:
        resp.close()
    assert settled(read_store) == (sum(costs), 0)  # spend is the sum of the real costs, to the micro-dollar
    assert sum(costs) <= budget


def free_burst(servers: list[ProxyServer], n: int, budget: int, read_store: Callable[[], tuple[int, int]],
               before: int) -> None:
    """`n` requests at once that run to their end: the store, read throughout, never shows the budget
    exceeded; the refused ones would each have crossed it by their worst case."""
    body = {**BODY, "messages": [{"role": "user", "content": "go [demo:pace=1] [demo:words=5]"}]}
    worst = worst_case(body)
    done = threading.Event()
    seen: list[tuple[int, int]] = []

    def watch() -> None:
        while not done.is_set():
            seen.append(read_store())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(n) as pool:
            answers = list(pool.map(lambda i: open_stream(servers[i % len(servers)], f"free-{uuid.uuid4().hex}",
                                                          body=body), range(n)))
            costs = list(pool.map(lambda r: usage_cost(r.rest()) if r.status == 200 else None, answers))
    finally:
        done.set()
        watcher.join()
    assert seen and all(spent + held <= budget for spent, held in seen), max(seen)
    refused = [r.json()["error"]["message"] for r in answers if r.status != 200]
    assert all(r.status in (200, 429) for r in answers)
    for message in refused:
        _, spent, reserved, cost = refusal_figures(message)
        assert round(cost * 1e6) == worst and round((spent + reserved + cost) * 1e6) > budget
    spent_now, held_now = settled(read_store)
    assert held_now == 0 and spent_now == before + sum(c for c in costs if c is not None)
    assert spent_now <= budget


def settled(read_store: Callable[[], tuple[int, int]], seconds: float = 10.0) -> tuple[int, int]:
    """The store's figures once no hold is left: a worker charges the requests that ended with its
    next admission, or alone within a fraction of a second (SETTLE_WITHIN) — read until then."""
    deadline = time.monotonic() + seconds
    figures = read_store()
    while figures[1] and time.monotonic() < deadline:
        time.sleep(0.01)  # a pause between two reads, not the synchronisation: the figures are
        figures = read_store()
    return figures


def sqlite_reader(path: Path, subject: str = "key:team-a") -> Callable[[], tuple[int, int]]:
    def read() -> tuple[int, int]:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            spent, held = db.execute("SELECT COALESCE(SUM(spent), 0), COALESCE(SUM(held), 0) FROM budget_spend "
                                     "WHERE subject=? AND window='usd_total'", (subject,)).fetchone()
        finally:
            db.close()
        return int(spent), int(held)
    return read


def redis_reader(url: str, prefix: str, subject: str = "key:team-a") -> Callable[[], tuple[int, int]]:
    client = redis.Redis.from_url(url)

    def read() -> tuple[int, int]:
        values = client.hmget(f"{prefix}budget:{subject}", "spent:usd_total:total", "held:usd_total:total")
        return int(values[0] or 0), int(values[1] or 0)
    return read


@pytest.fixture
def seven(demo_upstream: DemoUpstream) -> Iterator[int]:
    yield 7 * worst_case(BODY) + worst_case(BODY) // 2  # room for exactly seven held worst cases


def test_a_burst_over_four_workers_never_exceeds_the_budget_and_a_restart_keeps_the_spend(
        demo_upstream: DemoUpstream, tmp_path: Path, seven: int) -> None:
    server = start_proxy(config(demo_upstream, {"usd_total": seven / 1e6}), tmp_path, workers=4)
    read = sqlite_reader(tmp_path / "state.db")
    try:
        held_burst([server], demo_upstream, 50, seven, read)
        free_burst([server], 50, seven, read, read()[0])
        shown = admin_keys(server)
        (team,) = [r for r in shown["data"] if r["name"] == "team-a"]
        spent, _ = read()
        assert team["usd_budget"]["usd_total"] == {"limit_usd": seven / 1e6, "spent_usd": spent / 1e6,
                                                   "reserved_usd": 0.0, "remaining_usd": (seven - spent) / 1e6,
                                                   "resets_in": None}
        assert team["budget"] is None and TEAM not in json.dumps(shown)  # the token limits' entry as it was
    finally:
        stop_proxy(server)
    again = start_proxy(config(demo_upstream, {"usd_total": seven / 1e6}), tmp_path, workers=2)
    try:
        (team,) = [r for r in admin_keys(again)["data"] if r["name"] == "team-a"]
        assert team["usd_budget"]["usd_total"]["spent_usd"] == spent / 1e6  # nothing lost to the restart
    finally:
        stop_proxy(again)


def test_two_hosts_on_one_redis_never_exceed_the_budget(
        demo_upstream: DemoUpstream, redis_url: str, tmp_path: Path, seven: int) -> None:
    prefix = f"bud{uuid.uuid4().hex[:6]}:"
    cfg = config(demo_upstream, {"usd_total": seven / 1e6}, state={"backend": "redis", "url": redis_url,
                                                                   "prefix": prefix})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()  # separate state directories: only Redis is shared
    host_a = start_proxy(dict(cfg), tmp_path / "a", workers=2)
    host_b = start_proxy(dict(cfg), tmp_path / "b", workers=2)
    read = redis_reader(redis_url, prefix)
    try:
        held_burst([host_a, host_b], demo_upstream, 50, seven, read)
        free_burst([host_a, host_b], 50, seven, read, read()[0])
        assert admin_keys(host_a)["data"] == admin_keys(host_b)["data"]  # one set of figures
    finally:
        stop_proxy(host_a)
        stop_proxy(host_b)


def test_the_sdks_raise_what_a_user_expects_and_a_group_holds_across_its_keys(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    cfg = config(demo_upstream, None, key_groups=[{"name": "eng", "keys": ["team-a", "team-b"],
                                                   "budget": {"usd_per_day": 0.002}}])
    server = start_proxy(cfg, tmp_path, workers=2)
    try:
        chat = openai.OpenAI(base_url=f"{server.url}/v1", api_key=TEAM, max_retries=0, timeout=20)
        hi = [{"role": "user", "content": "hi [demo:pace=0] [demo:words=3]"}]
        answer = chat.chat.completions.create(model="demo-model", messages=hi, max_tokens=20)  # type: ignore[arg-type]
        assert answer.usage is not None
        spent = answer.usage.prompt_tokens * IN + answer.usage.completion_tokens * OUT
        big = 2000 // OUT  # a cap whose worst case alone is over what is left of the $0.002
        expected = ("The key group 'eng' (which the API key 'team-b' is in) would go over its usd_per_day "
                    "budget ($0.002 a UTC day): $" + f"{spent / 1e6:.6f}".rstrip("0") + " spent")
        # The first answer's cost is charged within a fraction of a second of its end (SETTLE_WITHIN),
        # until then held as "reserved by requests in flight": a refused request costs nothing, so
        # it is asked again until the refusal shows the charge (on a loaded machine, a while).
        deadline = time.monotonic() + 10.0
        while True:
            with pytest.raises(openai.RateLimitError) as chat_refused:  # team-b: the same group's budget
                openai.OpenAI(base_url=f"{server.url}/v1", api_key=OTHER, max_retries=0, timeout=20).chat.completions.create(
                    model="demo-model", messages=hi, max_tokens=big)  # type: ignore[arg-type]
            said = chat_refused.value.body["message"]  # type: ignore[index]
            if said.startswith(expected) or time.monotonic() > deadline:
                break
        assert chat_refused.value.code == "insufficient_quota" and chat_refused.value.status_code == 429
        assert said.startswith(expected), said
        assert "it resets at " in said
        with pytest.raises(openai.RateLimitError) as responses_refused:
            chat.responses.create(model="demo-model", input="hi", max_output_tokens=big)
        assert responses_refused.value.code == "insufficient_quota"
        claude = anthropic.Anthropic(base_url=server.url, api_key=TEAM, max_retries=0, timeout=20)
        with pytest.raises(anthropic.BadRequestError) as messages_refused:
            claude.messages.create(model="demo-model", max_tokens=big, messages=[{"role": "user", "content": "hi"}])
        assert messages_refused.value.status_code == 400
        assert messages_refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert "usd_per_day budget" in messages_refused.value.message
        groups = admin_keys(server)["groups"]
        assert groups[0]["name"] == "eng" and groups[0]["usd_budget"]["usd_per_day"]["spent_usd"] == spent / 1e6
        assert chat.chat.completions.create(model="demo-model", messages=hi, max_tokens=5)  # type: ignore[arg-type]
    finally:
        stop_proxy(server)


def test_an_unpriced_model_is_refused_under_a_budget_and_served_outside_one(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(config(demo_upstream, {"usd_per_day": 1}), tmp_path)
    try:
        body = {"model": "mystery-model", "messages": [{"role": "user", "content": "hi [demo:pace=0]"}]}
        refused = request(server.url, "POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {TEAM}"})
        error = refused.json()["error"]
        assert refused.status == 403 and error["code"] == "model_not_priced"
        assert "the model 'mystery-model' has no price on the upstream 'main'" in error["message"]
        served = request(server.url, "POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {OTHER}"})
        assert served.status == 200
    finally:
        stop_proxy(server)


def test_a_store_that_cannot_be_reached_refuses_budgeted_requests_only(
        demo_upstream: DemoUpstream, fresh_redis: RedisServer, tmp_path: Path) -> None:
    cfg = config(demo_upstream, {"usd_per_day": 1}, state={"backend": "redis", "url": fresh_redis.url})
    server = start_proxy(cfg, tmp_path)
    try:
        body = {"model": "demo-model", "max_tokens": 5, "messages": [{"role": "user", "content": "hi [demo:pace=0]"}]}
        assert request(server.url, "POST", "/v1/chat/completions", body,
                       {"Authorization": f"Bearer {TEAM}"}).status == 200
        fresh_redis.kill()
        refused = request(server.url, "POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {TEAM}"})
        assert refused.status == 503 and refused.json()["error"]["code"] == "budget_store_unavailable"
        assert request(server.url, "POST", "/v1/chat/completions", body,
                       {"Authorization": f"Bearer {OTHER}"}).status == 200  # no budget: unaffected
    finally:
        stop_proxy(server)


class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []
    arrived = threading.Event()

    def do_POST(self) -> None:
        self.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()
        self.arrived.set()

    def log_message(self, *args: Any) -> None:
        pass


def test_a_crossing_of_alert_at_is_posted_to_the_webhook_once(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    hook = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{hook.server_address[1]}/alerts"
    server = start_proxy(config(demo_upstream, {"usd_per_day": 0.01, "alert_at": 0.5}, alerts={"webhook_url": url}),
                         tmp_path, workers=2)
    try:
        body = {"model": "demo-model", "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi [demo:pace=0] [demo:words=5]"}]}
        spent = 0
        while spent < 0.008 * 1e6:  # past half of the $0.01, then on: still one alert
            resp = request(server.url, "POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {TEAM}"})
            usage = resp.json()["usage"]
            spent += usage["prompt_tokens"] * IN + usage["completion_tokens"] * OUT
        assert _Hook.arrived.wait(30)
        metrics = request(server.url, "GET", "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).body().decode()
        assert 'llm_proxy_budget_alerts_total{subject="key:team-a",window="usd_per_day"} 1.0' in metrics
        assert "budget alert: the API key 'team-a' has spent" in server.log()
    finally:
        stop_proxy(server)
        hook.shutdown()
    assert len(_Hook.received) == 1
    (alert,) = _Hook.received
    assert (alert["event"], alert["subject"], alert["window"], alert["alert_at"]) == (
        "budget_alert", "key:team-a", "usd_per_day", 0.5)


def test_the_websocket_and_compaction_are_held_to_the_budget(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    from websockets.sync.client import connect

    server = start_proxy(config(demo_upstream, {"usd_per_day": 0.0005}), tmp_path)
    try:
        rid = uuid.uuid4().hex
        big = {"model": "demo-model", "max_output_tokens": 100,  # 100 x $20/M alone is over the $0.0005
               "input": [{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}]}
        with connect(server.url.replace("http://", "ws://") + "/v1/responses", open_timeout=10,
                     additional_headers={"Authorization": f"Bearer {TEAM}", "X-Request-Id": rid}) as ws:
            ws.send(json.dumps({"type": "response.create", **big}))
            error = json.loads(ws.recv(timeout=20))
        assert error["type"] == "error" and error["status"] == 429
        assert (error["error"]["type"], error["error"]["code"]) == ("insufficient_quota", "insufficient_quota")
        assert demo_upstream.requests(f"{rid}-1") == []
        compact = request(server.url, "POST", "/v1/responses/compact", big, {"Authorization": f"Bearer {TEAM}"})
        assert compact.status == 429 and compact.json()["error"]["code"] == "insufficient_quota"
    finally:
        stop_proxy(server)
