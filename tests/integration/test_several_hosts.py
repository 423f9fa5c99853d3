"""Several hosts, one Redis (`state: {backend: redis}`): two proxy "hosts" — two gunicorn masters
with state directories of their own — in front of the demo upstream, sharing a real Redis
(tests/redis_server.py). What one host learns or is told, the other acts on within a second;
probes run on one host, and another takes over when it dies; a Responses conversation continues on
either; `max_concurrency` and usage hold across both; Redis stopped mid-traffic fails no request
and loses no count.

Propagation and takeover times are measured and printed (`pytest -s` shows them)."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY, account, admin
from tests.integration.test_pool_shared_state import chat, eventually
from tests.redis_server import RedisServer
from tests.wire import request

pytestmark = pytest.mark.live


def hosts_config(demo: DemoUpstream, redis_url: str, keys: list[str], max_concurrency: int | None = None,
                 **pool: Any) -> dict[str, Any]:
    accounts = [{"id": f"acct-{i}", "api_key": key, "balance": 100 - i} for i, key in enumerate(keys)]
    if max_concurrency is not None:
        for acct in accounts:
            acct["max_concurrency"] = max_concurrency
    return {"client_keys": [CLIENT_KEY], "admin_keys": [ADMIN_KEY],
            "state": {"backend": "redis", "url": redis_url, "prefix": f"test-{uuid.uuid4().hex[:8]}:"},
            "upstreams": [{"name": "main", "protocol": "chat_completions", "base_url": demo.url,
                           "pool": {"policy": "balance", "probe": {"interval": 3600}, **pool},
                           "accounts": accounts}]}


class Hosts:
    def __init__(self, config: dict[str, Any], tmp: Path, workers: int = 2) -> None:
        self.servers: list[ProxyServer] = []
        for name in ("a", "b"):  # a state directory each, as two machines would have
            folder = tmp / name
            folder.mkdir()
            self.servers.append(start_proxy(json.loads(json.dumps(config)), folder, workers=workers))

    def stop(self) -> None:
        for server in self.servers:
            if server.process.poll() is None:
                stop_proxy(server)


@pytest.fixture
def hosts() -> Iterator[list[Hosts]]:
    started: list[Hosts] = []
    yield started
    for pair in started:
        pair.stop()


def worker_pid(server: ProxyServer) -> int:
    return int(admin(server, "GET", "/admin/accounts")[1]["worker"])


def ready(server: ProxyServer) -> tuple[int, dict[str, Any]]:
    resp = request(server.url, "GET", "/readyz", None, {})
    out = resp.status, resp.json()
    resp.close()
    return out


def test_an_account_disabled_on_one_host_is_never_tried_by_the_other_after_a_second(
        hosts: list[Hosts], demo_upstream: DemoUpstream, redis_url: str, tmp_path: Path) -> None:
    keys = [f"sk-hosts-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    pair = Hosts(hosts_config(demo_upstream, redis_url, keys), tmp_path)
    hosts.append(pair)
    a, b = pair.servers
    warm = uuid.uuid4().hex
    assert chat(b, warm) == 200 and demo_upstream.requests(warm)[-1]["key"] == keys[0]  # B prefers acct-0
    watching = ThreadPoolExecutor(max_workers=1)

    def watch_b() -> list[tuple[float, int]]:  # B's /readyz: read from a worker's memory, no sync
        seen, until = [], time.monotonic() + 2.0
        while time.monotonic() < until:
            seen.append((time.time(), ready(b)[1]["upstreams"]["main"]["disabled"]))
        return seen

    watched = watching.submit(watch_b)
    disabled_at = time.time()
    assert admin(a, "POST", "/admin/accounts/main/acct-0/disable", {"reason": "revoked"})[0] == 200
    answered_at = time.time()
    sent = []
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # a steady trickle to B, over new connections spread over its workers
        rid = uuid.uuid4().hex
        assert chat(b, rid) == 200
        sent.append(rid)
    seen = watched.result()
    watching.shutdown()
    stale = [t for t, disabled in seen if disabled == 0 and t > disabled_at]
    on_disabled = [r["received_at"] for rid in sent for r in demo_upstream.requests(rid) if r["key"] == keys[0]]
    print(f"\nrevocation through A (admin call answered in {(answered_at - disabled_at) * 1000:.0f} ms), seen by "
          f"B's workers: the last of {len(seen)} /readyz answers of B still counting it active came "
          f"{(max(stale) - disabled_at) * 1000 if stale else 0:.0f} ms after the call began; "
          f"{len(on_disabled)} of {len(sent)} requests to B after it tried the account")
    assert [t for t in stale if t > disabled_at + 1.0] == []
    assert [t for t in on_disabled if t > disabled_at + 1.0] == []
    assert (account(b, "main", "acct-0")["status"], account(b, "main", "acct-0")["reason"]) == (
        "disabled", "admin: revoked")
    # The runtime overlay too: an account added through B is served by A, and removed through A, gone on B.
    added = f"sk-hosts-added-{uuid.uuid4().hex[:6]}"
    assert admin(b, "POST", "/admin/accounts/main", {"id": "added", "api_key": added})[0] in (200, 201)
    assert admin(b, "POST", "/admin/accounts/main/acct-1/disable", {"reason": "rotating"})[0] == 200

    def served_by_added() -> bool:  # on A, within a second of B's change
        rid = uuid.uuid4().hex
        assert chat(a, rid) == 200
        return bool(demo_upstream.requests(rid)[-1]["key"] == added)

    assert eventually(served_by_added, 1.0)
    assert admin(a, "DELETE", "/admin/accounts/main/added")[0] == 200
    assert eventually(lambda: all(x["id"] != "added" for x in
                                  admin(b, "GET", "/admin/accounts")[1]["upstreams"][0]["accounts"]), 1.0)


def test_probes_run_on_one_host_and_another_takes_over_when_it_dies(
        hosts: list[Hosts], demo_upstream: DemoUpstream, redis_url: str, tmp_path: Path) -> None:
    keys = [f"sk-lead-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    demo_upstream.control("/_demo/keys", body={keys[0]: {"status": 401}})
    try:
        pair = Hosts(hosts_config(demo_upstream, redis_url, keys, probe={"interval": 0.3}), tmp_path, workers=1)
        hosts.append(pair)
        a, b = pair.servers
        assert chat(a, uuid.uuid4().hex) == 200  # acct-0's key is revoked: disabled, acct-1 serves

        def probes() -> list[dict[str, Any]]:
            return [r for r in demo_upstream.requests("") if r["key"] == keys[0] and r["path"] == "/v1/models"
                    and r["request_id"].startswith("probe-")]

        assert eventually(lambda: len(probes()) >= 6)
        (leader,) = {p["request_id"] for p in probes()}  # one prober for both hosts
        pids = {worker_pid(server): server for server in (a, b)}
        (dead_pid,) = [pid for pid in pids if leader.endswith(f":{pid}")]
        dead, survivor = pids[dead_pid], pids[next(p for p in pids if p != dead_pid)]
        dead.process.send_signal(signal.SIGKILL)  # the master first, so no worker is forked again
        dead.process.wait()
        os.kill(dead_pid, signal.SIGKILL)
        killed_at = time.time()

        def taken_over() -> list[dict[str, Any]]:
            return [p for p in probes() if p["request_id"] != leader and p["received_at"] > killed_at]

        assert eventually(lambda: bool(taken_over()), 15)
        took = taken_over()[0]
        assert took["request_id"].endswith(f":{worker_pid(survivor)}")
        print(f"\nleader killed: probes taken over by the other host after "
              f"{took['received_at'] - killed_at:.2f} s")
    finally:
        demo_upstream.control("/_demo/keys", method="DELETE")


def test_a_response_issued_by_one_host_continues_on_the_other(
        hosts: list[Hosts], demo_upstream: DemoUpstream, redis_url: str, tmp_path: Path) -> None:
    keys = [f"sk-resp-{uuid.uuid4().hex[:6]}"]
    pair = Hosts(hosts_config(demo_upstream, redis_url, keys), tmp_path)
    hosts.append(pair)
    a, b = pair.servers
    marker = uuid.uuid4().hex
    on_a = OpenAI(base_url=f"{a.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
    on_b = OpenAI(base_url=f"{b.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
    first = on_a.responses.create(model="m", input=f"remember {marker} [demo:pace=0] [demo:words=3]")
    second_id = uuid.uuid4().hex
    second = on_b.responses.create(model="m", input="what did I say? [demo:pace=0]", previous_response_id=first.id,
                                   extra_headers={"X-Request-Id": second_id})
    assert second.previous_response_id == first.id and second.output_text
    (sent,) = [r["body"] for r in demo_upstream.requests(second_id)]
    texts = json.dumps(sent["messages"])
    assert marker in texts and first.output_text.split()[0] in texts  # the whole conversation went upstream
    assert on_b.responses.retrieve(first.id).id == first.id
    on_b.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):  # deleted through B: gone on A too
        on_a.responses.retrieve(first.id)


def test_max_concurrency_holds_across_both_hosts(
        hosts: list[Hosts], demo_upstream: DemoUpstream, redis_url: str, tmp_path: Path) -> None:
    keys = [f"sk-conc-{uuid.uuid4().hex[:6]}"]
    pair = Hosts(hosts_config(demo_upstream, redis_url, keys, max_concurrency=2), tmp_path)
    hosts.append(pair)
    a, b = pair.servers
    batch = uuid.uuid4().hex

    def slow(i: int) -> int:  # streams held 2 s before their first byte: all six overlap
        resp = request((a, b)[i % 2].url, "POST", "/v1/chat/completions",
                       {"model": "m", "stream": True,
                        "messages": [{"role": "user", "content": "hi [demo:prefill=2] [demo:words=2]"}]},
                       {"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": f"{batch}-{i}"})
        resp.body()
        resp.close()
        return resp.status

    with ThreadPoolExecutor(max_workers=6) as pool:
        statuses = list(pool.map(slow, range(6)))
    assert sorted(statuses) == [200, 200, 503, 503, 503, 503]
    assert sum(len(demo_upstream.requests(f"{batch}-{i}")) for i in range(6)) == 2
    assert chat(b, uuid.uuid4().hex) == 200  # the slots were given back


def usage_total(server: ProxyServer, since: float) -> int:
    resp = request(server.url, "GET", f"/admin/usage?since={int(since) - 60}", None,
                   {"Authorization": f"Bearer {ADMIN_KEY}"})
    body = resp.json()
    resp.close()
    return int(body["totals"]["requests"]) if resp.status == 200 else -1


def counted(server: ProxyServer) -> int:
    return sum(x["requests"] for x in admin(server, "GET", "/admin/accounts")[1]["upstreams"][0]["accounts"])


def test_usage_totals_are_exact_across_two_hosts(
        hosts: list[Hosts], demo_upstream: DemoUpstream, redis_url: str, tmp_path: Path) -> None:
    keys = [f"sk-usage-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    pair = Hosts(hosts_config(demo_upstream, redis_url, keys), tmp_path)
    hosts.append(pair)
    a, b = pair.servers
    started = time.time()
    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(lambda i: chat((a, b)[i % 2], uuid.uuid4().hex), range(80)))
    assert statuses == [200] * 80
    assert usage_total(a, started) == usage_total(b, started) == 80  # written before each answer ended
    assert eventually(lambda: counted(a) == counted(b) == 80, 3)


def test_redis_stopped_mid_traffic_fails_no_request_and_loses_no_count(
        hosts: list[Hosts], demo_upstream: DemoUpstream, durable_redis: RedisServer, tmp_path: Path) -> None:
    keys = [f"sk-down-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    pair = Hosts(hosts_config(demo_upstream, durable_redis.url, keys), tmp_path)
    hosts.append(pair)
    a, b = pair.servers
    started, sent = time.time(), 0
    for i in range(10):
        assert chat((a, b)[i % 2], uuid.uuid4().hex) == 200
        sent += 1
    durable_redis.kill()

    def degraded() -> bool:
        nonlocal sent
        for server in (a, b):
            assert chat(server, uuid.uuid4().hex) == 200
            sent += 1
        return all(ready(server)[1]["state"] == "degraded" for server in (a, b))

    assert eventually(degraded)
    assert all(ready(server)[0] == 200 for server in (a, b))  # degraded, still serving
    metrics = request(a.url, "GET", "/metrics", None, {"Authorization": f"Bearer {ADMIN_KEY}"})
    assert 'llm_proxy_state_store_up{backend="redis"} 0.0' in metrics.body().decode()
    metrics.close()
    for i in range(10):
        assert chat((a, b)[i % 2], uuid.uuid4().hex) == 200
        sent += 1
    durable_redis.restart()
    assert eventually(lambda: all(ready(server)[1]["state"] == "ok" for server in (a, b)))
    assert eventually(lambda: usage_total(a, started) == sent and usage_total(b, started) == sent)
    assert eventually(lambda: counted(a) == counted(b) == sent)
    print(f"\nRedis down mid-traffic: {sent} requests, all 200; usage and counters complete after it returned")
