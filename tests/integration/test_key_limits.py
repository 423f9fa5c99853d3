"""Per-client-key limits on live servers, as clients see them: a burst over four workers (one SQLite
state file) and over two hosts (two gunicorn masters, one Redis) gets exactly the limit through;
the rest get 429 in their protocol's shape with Retry-After and a message naming the key and the
limit (the SDKs raise RateLimitError); tokens are charged as the upstream reported them and
`GET /admin/keys` shows what remains; a stream in flight is never cut, and a Redis that dies leaves
each host enforcing the limits on its own, with one warning."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.redis_server import RedisServer
from tests.wire import request

ADMIN_KEY = "sk-admin-limits"
TEAM = "sk-team-limits-0123456789"
HI = [{"role": "user", "content": "hi [demo:pace=0] [demo:words=3]"}]


def limited(demo: DemoUpstream, limits: dict[str, int], **top: Any) -> dict[str, Any]:
    return base_config(demo.url, client_keys=[CLIENT_KEY, {"name": "team-a", "key": TEAM, "limits": limits}],
                       admin_keys=[ADMIN_KEY], **top)


def chat(proxy: ProxyServer, request_id: str, key: str = TEAM, content: str = HI[0]["content"]) -> tuple[int, dict[str, str], Any]:
    resp = request(proxy.url, "POST", "/v1/chat/completions",
                   {"model": "demo-model", "messages": [{"role": "user", "content": content}]},
                   {"Authorization": f"Bearer {key}", "X-Request-Id": request_id})
    body = json.loads(resp.body())
    resp.close()
    return resp.status, resp.headers, body


def budget(proxy: ProxyServer) -> dict[str, Any]:
    resp = request(proxy.url, "GET", "/admin/keys", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    rows = resp.json()["data"]
    resp.close()
    (team,) = [r for r in rows if r["name"] == "team-a"]
    return team


def burst(servers: list[ProxyServer], n: int) -> list[tuple[str, tuple[int, dict[str, str], Any]]]:
    """`n` requests at once, dealt round-robin over `servers`."""
    ids = [f"limits-{uuid.uuid4().hex}" for _ in range(n)]
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda i: chat(servers[i % len(servers)], ids[i]), range(n)))
    return list(zip(ids, results, strict=True))


def check_burst(results: list[tuple[str, tuple[int, dict[str, str], Any]]], limit: int,
                demo: DemoUpstream) -> None:
    statuses = [status for _, (status, _, _) in results]
    assert statuses.count(200) == limit and statuses.count(429) == len(results) - limit, statuses
    for request_id, (status, headers, body) in results:
        sent = demo.requests(request_id)
        if status == 200:
            assert len(sent) == 1
            continue
        assert sent == []  # refused before any upstream
        assert 1 <= int(headers["retry-after"]) <= 60
        assert body["error"]["code"] == "rate_limit_exceeded" and body["error"]["message"].startswith(
            f"The API key 'team-a' has reached its requests_per_minute limit ({limit} requests a minute); retry in ")


@pytest.fixture(scope="module")
def four_workers(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    server = start_proxy(limited(demo_upstream, {"requests_per_minute": 5}),
                         Path(tmp_path_factory.mktemp("limits4")), workers=4)
    yield server
    stop_proxy(server)


def test_a_burst_over_four_workers_gets_exactly_the_limit_through(
        four_workers: ProxyServer, demo_upstream: DemoUpstream) -> None:
    results = burst([four_workers], 16)
    # Then one at a time, each on a connection of its own: whichever worker accepts it (a burst may
    # all land on one), none may let another through.
    results += [(f"limits-{uuid.uuid4().hex}", (0, {}, None)) for _ in range(24)]
    for i in range(16, 40):
        results[i] = (results[i][0], chat(four_workers, results[i][0]))
    check_burst(results, 5, demo_upstream)
    assert chat(four_workers, "other", key=CLIENT_KEY)[0] == 200  # a key without limits is not held back
    shown = budget(four_workers)
    assert shown["limits"] == {"requests_per_minute": 5}
    assert shown["budget"]["requests_per_minute"]["remaining"] == 0
    assert 0 < shown["budget"]["requests_per_minute"]["resets_in"] <= 60
    assert TEAM not in json.dumps(shown)


def test_tokens_are_charged_as_reported_and_the_sdks_read_the_429(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(limited(demo_upstream, {"tokens_per_day": 400, "tokens_per_minute": 100_000}), tmp_path,
                         workers=2)
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=TEAM, max_retries=0, timeout=20)
        used = 0
        with pytest.raises(openai.RateLimitError) as refused:
            for _ in range(40):
                answer = client.chat.completions.create(
                    model="demo-model", messages=[{"role": "user", "content": "count [demo:pace=0] [demo:words=25]"}])
                assert answer.usage is not None
                used += answer.usage.prompt_tokens + answer.usage.completion_tokens
                assert budget(server)["budget"]["tokens_per_day"]["used"] == used  # charged as reported
        assert 400 - 60 < used <= 400 + 60  # stopped at the budget, give or take one request's estimate
        error = refused.value
        midnight = (time.time() // 86400 + 1) * 86400
        assert abs(int(error.response.headers["retry-after"]) - (midnight - time.time())) < 5
        assert "The API key 'team-a' has reached its tokens_per_day limit (400 tokens a UTC day)" in error.message
        claude = anthropic.Anthropic(base_url=server.url, api_key=TEAM, max_retries=0, timeout=20)
        with pytest.raises(anthropic.RateLimitError) as an:
            claude.messages.create(model="demo-model", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
        assert an.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
        assert "tokens_per_day" in an.value.message and int(an.value.response.headers["retry-after"]) > 0
        shown = budget(server)["budget"]["tokens_per_day"]
        assert (shown["used"], shown["remaining"]) == (used, max(0, 400 - used))
    finally:
        stop_proxy(server)


def test_max_concurrent_refuses_a_second_request_and_never_cuts_the_stream_in_flight(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(limited(demo_upstream, {"max_concurrent": 1}), tmp_path, workers=2)
    try:
        stream = request(server.url, "POST", "/v1/chat/completions",
                         {"model": "demo-model", "stream": True,
                          "messages": [{"role": "user", "content": "go [demo:pace=50] [demo:words=20]"}]},
                         {"Authorization": f"Bearer {TEAM}"})
        assert stream.status == 200 and stream.next_chunk()  # the stream is flowing
        status, headers, body = chat(server, "second")
        assert status == 429 and headers["retry-after"] == "1"
        assert body["error"]["message"] == ("The API key 'team-a' has 1 requests in flight, its max_concurrent "
                                            "limit; send this one when another has finished.")
        rest = b"".join(stream.rest())
        stream.close()
        assert rest.rstrip().endswith(b"data: [DONE]")  # finished as it would have without the refusal
        assert chat(server, "third")[0] == 200  # the slot is free again once the stream ended
        assert budget(server)["budget"]["max_concurrent"]["used"] == 0
    finally:
        stop_proxy(server)


def redis_config(demo: DemoUpstream, url: str, limits: dict[str, int]) -> dict[str, Any]:
    return limited(demo, limits, state={"backend": "redis", "url": url, "prefix": f"lim{uuid.uuid4().hex[:6]}:"})


def test_two_hosts_on_one_redis_share_the_limit_exactly(
        demo_upstream: DemoUpstream, redis_url: str, tmp_path: Path) -> None:
    cfg = redis_config(demo_upstream, redis_url, {"requests_per_minute": 6})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()  # separate state directories: only Redis is shared
    host_a = start_proxy(dict(cfg), tmp_path / "a", workers=2)
    host_b = start_proxy(dict(cfg), tmp_path / "b", workers=2)
    try:
        check_burst(burst([host_a, host_b], 20), 6, demo_upstream)
        assert budget(host_a)["budget"] == budget(host_b)["budget"]  # one set of figures
    finally:
        stop_proxy(host_a)
        stop_proxy(host_b)


def test_a_dead_redis_leaves_each_host_enforcing_the_limits_with_one_warning(
        demo_upstream: DemoUpstream, fresh_redis: RedisServer, tmp_path: Path) -> None:
    server = start_proxy(redis_config(demo_upstream, fresh_redis.url, {"requests_per_minute": 3}), tmp_path)
    try:
        assert chat(server, "before")[0] == 200  # through Redis
        fresh_redis.kill()
        statuses = [chat(server, f"during-{i}")[0] for i in range(5)]
        assert statuses == [200, 200, 200, 429, 429]  # the host's own figures now: a fresh budget of 3
        log = server.log()
        assert log.count("the Redis state store failed") == 1, log
        assert "client key limits are enforced per host until it answers again" in log
    finally:
        stop_proxy(server)
