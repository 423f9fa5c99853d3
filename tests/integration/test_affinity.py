"""Conversation affinity on live servers, against the demo upstream's per-account prompt cache: a
Claude Code session (its X-Claude-Code-Session-Id header) keeps to one account over four workers
and so reads its prefix from the cache from the second turn on; when that account cools the
session moves once and stays; `pool.affinity: off` rotates it (and the cache is missed); two hosts
on one Redis keep a conversation on one account whichever host each turn lands on; a Responses
`previous_response_id` chain follows the account of the response it continues."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy

KEYS = [f"sk-affinity-{i}-0123456789" for i in range(4)]
# Made unique per conversation where used: the demo's cache is per account for the whole session.
SYSTEM = "You are a careful assistant. [demo:cache] " + "Context. " * 200


def config(demo: DemoUpstream, affinity: bool = True, **top: Any) -> dict[str, Any]:
    return {"client_keys": [CLIENT_KEY], "upstreams": [{
        "name": "main", "protocol": "chat_completions", "base_url": demo.url,
        "pool": {"policy": "round_robin", "affinity": "on" if affinity else "off", "probe": {"interval": 3600}},
        "accounts": [{"id": f"acct-{i}", "api_key": key} for i, key in enumerate(KEYS)]}], **top}


def session(server: ProxyServer, demo: DemoUpstream, turns: int, session_id: str,
            history: list[dict[str, Any]] | None = None) -> tuple[list[str], list[int]]:
    """A Claude Code-like session over the Anthropic SDK: the accounts each turn reached, and the
    cached input tokens each turn reported."""
    history = history if history is not None else []
    accounts, cached = [], []
    for _ in range(turns):
        # A connection per turn, as turns minutes apart get: each may land on any worker.
        client = anthropic.Anthropic(base_url=server.url, api_key=CLIENT_KEY, max_retries=0, timeout=20)
        history.append({"role": "user", "content": f"step {len(history)} [demo:pace=0] [demo:words=4]"})
        rid = f"aff-{uuid.uuid4().hex}"
        answer = client.messages.create(model="demo-model", max_tokens=50, system=f"{session_id}: {SYSTEM}",
                                        messages=history,
                                        extra_headers={"X-Claude-Code-Session-Id": session_id, "X-Request-Id": rid})
        history.append({"role": "assistant", "content": answer.content[0].text})  # type: ignore[union-attr]
        accounts.append(KEYS.index(demo.requests(rid)[-1]["key"]))
        cached.append(answer.usage.cache_read_input_tokens or 0)
        client.close()
    return accounts, cached


def test_a_session_stays_on_its_account_over_four_workers_and_moves_once_when_it_cools(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(config(demo_upstream), tmp_path, workers=4)
    try:
        # Eight sessions at once, so their turns land on whichever of the four workers accepts them.
        with ThreadPoolExecutor(8) as pool:
            runs = list(pool.map(lambda _: session(server, demo_upstream, 5, str(uuid.uuid4())), range(8)))
        for accounts, cached in runs:
            assert len(set(accounts)) == 1, runs  # round_robin alone would rotate over all four
            assert cached[0] == 0 and all(c > 0 for c in cached[1:]), runs  # the prefix is read from its cache
        sid = str(uuid.uuid4())
        history: list[dict[str, Any]] = []
        accounts, _ = session(server, demo_upstream, 2, sid, history)
        home = KEYS[accounts[0]]
        demo_upstream.control("/_demo/keys", body={home: {"status": 429, "headers": {"Retry-After": "60"}}})
        try:
            moved, moved_cached = session(server, demo_upstream, 3, sid, history)
        finally:
            demo_upstream.control("/_demo/keys", method="DELETE")
        assert moved[0] != accounts[0] and moved == [moved[0]] * 3, moved  # moved once, then stays
        assert moved_cached[0] == 0 and moved_cached[1] > 0  # the new account's cache warms up
    finally:
        stop_proxy(server)


def test_with_affinity_off_the_session_rotates_and_misses_the_cache(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(config(demo_upstream, affinity=False), tmp_path)
    try:
        accounts, cached = session(server, demo_upstream, 4, str(uuid.uuid4()))
        assert sorted(accounts) == [0, 1, 2, 3] and cached == [0, 0, 0, 0]
    finally:
        stop_proxy(server)


def test_two_hosts_on_one_redis_keep_a_conversation_on_one_account(
        demo_upstream: DemoUpstream, redis_url: str, tmp_path: Path) -> None:
    cfg = config(demo_upstream, state={"backend": "redis", "url": redis_url, "prefix": "aff:"})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    hosts = [start_proxy(dict(cfg), tmp_path / "a"), start_proxy(dict(cfg), tmp_path / "b")]
    try:
        seen = []
        messages: list[dict[str, Any]] = [{"role": "system", "content": f"{uuid.uuid4()}: {SYSTEM}"}]
        for n in range(6):  # turns alternate between the hosts, as a load balancer would send them
            client = openai.OpenAI(base_url=f"{hosts[n % 2].url}/v1", api_key=CLIENT_KEY, max_retries=0)
            messages.append({"role": "user", "content": f"turn {n} [demo:pace=0] [demo:words=3]"})
            rid = f"aff-{uuid.uuid4().hex}"
            answer = client.chat.completions.create(model="demo-model", messages=messages,  # type: ignore[arg-type]
                                                    user="alice", extra_headers={"X-Request-Id": rid})
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})
            seen.append(demo_upstream.requests(rid)[-1]["key"])
        assert len(set(seen)) == 1, seen
    finally:
        for host in hosts:
            stop_proxy(host)


def test_a_previous_response_id_chain_follows_its_account(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(config(demo_upstream), tmp_path)
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0)
        previous, seen = None, []
        for n in range(4):
            rid = f"aff-{uuid.uuid4().hex}"
            extra = {"previous_response_id": previous} if previous else {}
            answer = client.responses.create(model="demo-model", input=f"turn {n} [demo:pace=0] [demo:words=3]",
                                             extra_headers={"X-Request-Id": rid}, **extra)  # type: ignore[arg-type]
            previous = answer.id
            seen.append(demo_upstream.requests(rid)[-1]["key"])
        assert len(set(seen)) == 1, seen
    finally:
        stop_proxy(server)


@pytest.fixture(autouse=True)
def _no_faults_left(demo_upstream: DemoUpstream) -> Any:
    yield
    demo_upstream.control("/_demo/keys", method="DELETE")
