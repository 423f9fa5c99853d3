"""The account pool through a live proxy: every failure class on all six paths (three protocols,
streaming and not), which account keys reached the upstream and in what order, the states that
result, the 429 when every account is throttled and the 503 when none is left, and the admin API."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests import audit
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.wire import request

ADMIN_KEY = "sk-admin-test"
BAD, GOOD = "sk-pool-bad", "sk-pool-good"
BAD_NET, GOOD_NET = "sk-pool-bad-net", "sk-pool-good-net"
PROTOCOLS = ("chat_completions", "messages", "responses")


def pool_config(demo: DemoUpstream, refused_port: int) -> dict[str, Any]:
    # policy "balance" makes the order deterministic: the richer "bad" account is always tried first.
    pool = {"policy": "balance", "probe": {"interval": 3600}}
    return {
        "client_keys": [CLIENT_KEY], "admin_keys": [ADMIN_KEY],
        "upstreams": [
            {"name": "main", "protocol": "chat_completions", "base_url": demo.url, "models": {"serve": ["pool-*"]}, "pool": pool,
             "accounts": [{"id": "bad", "api_key": BAD, "balance": 100}, {"id": "good", "api_key": GOOD, "balance": 50}]},
            {"name": "net", "protocol": "chat_completions", "base_url": demo.url, "models": {"serve": ["net-*"]}, "pool": pool,
             "accounts": [{"id": "bad", "api_key": BAD_NET, "balance": 100,
                           "proxy": f"http://127.0.0.1:{refused_port}"},  # its outbound proxy refuses connections
                          {"id": "good", "api_key": GOOD_NET, "balance": 50}]},
        ],
    }


@pytest.fixture(scope="module")
def pool_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    server = start_proxy(pool_config(demo_upstream, closed.getsockname()[1]), Path(tmp_path_factory.mktemp("pool")))
    yield server
    stop_proxy(server)
    closed.close()
    demo_upstream.control("/_demo/keys", method="DELETE")


def admin(proxy: ProxyServer, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    audit.register([str((body or {}).get("api_key") or "")])  # keys added at runtime must not leak either
    resp = request(proxy.url, method, path, body, {"Authorization": f"Bearer {ADMIN_KEY}"})
    out = resp.status, resp.json()
    resp.close()
    return out


def account(proxy: ProxyServer, upstream: str, account_id: str) -> dict[str, Any]:
    _, listing = admin(proxy, "GET", "/admin/accounts")
    (up,) = [u for u in listing["upstreams"] if u["name"] == upstream]
    (found,) = [a for a in up["accounts"] if a["id"] == account_id]
    return found


def call(proxy: ProxyServer, protocol: str, stream: bool, model: str, request_id: str) -> tuple[int, Any]:
    """One request as each protocol's clients send it; a stream is read to its end."""
    text = "hi [demo:pace=0] [demo:words=3]"
    path, body = {
        "chat_completions": ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}),
        "messages": ("/v1/messages", {"max_tokens": 50, "messages": [{"role": "user", "content": text}]}),
        "responses": ("/v1/responses", {"input": text, "store": False}),
    }[protocol]
    resp = request(proxy.url, "POST", path, {**body, "model": model, "stream": stream},
                   {"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": request_id})
    if resp.status == 200 and stream:
        frames = b"".join(resp.rest())
        resp.close()
        terminator = {"chat_completions": b"data: [DONE]\n\n", "messages": b"event: message_stop",
                      "responses": b"event: response.completed"}[protocol]
        assert terminator in frames
        return 200, frames
    out = resp.status, resp.json()
    resp.close()
    return out


def error_type(protocol: str, body: dict[str, Any]) -> str:
    return str(body["error"]["type"])


CASES = {
    # name: (fault on the bad key, model, keys expected at the upstream, client status, bad's state after)
    "estimated_cost": ({"status": 403, "body": {"error": {"message": "Request blocked: estimated cost $9 over limit"}}},
                       "pool-x", ["bad"], 403, "active"),
    "payload_413": ({"status": 413}, "pool-x", ["bad"], 413, "active"),
    "context_length": ({"status": 400, "body": {"error": {"message": "This model's maximum context length is 8192 tokens",
                                                          "code": "context_length_exceeded"}}},
                       "pool-x", ["bad"], 400, "active"),
    "insufficient_tokens": ({"status": 403, "body": {"error": {"message": "Insufficient tokens, upgrade your plan"}}},
                            "pool-x", ["bad", "good"], 200, "active"),
    "exhausted_429": ({"status": 429, "headers": {"Retry-After": "120"}}, "pool-x", ["bad", "good"], 200, "cooling"),
    "exhausted_402": ({"status": 402}, "pool-x", ["bad", "good"], 200, "cooling"),
    "auth_401": ({"status": 401}, "pool-x", ["bad", "good"], 200, "disabled"),
    "other_500": ({"status": 500}, "pool-x", ["bad"], 500, "active"),
    "network": ({}, "net-x", ["good"], 200, "active"),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", list(CASES))
def test_failure_classes(pool_proxy: ProxyServer, demo_upstream: DemoUpstream, case: str, protocol: str,
                         stream: bool) -> None:
    fault, model, expected_keys, status, state = CASES[case]
    upstream = "net" if model.startswith("net") else "main"
    demo_upstream.control("/_demo/keys", method="DELETE")
    assert admin(pool_proxy, "POST", f"/admin/accounts/{upstream}/bad/enable")[0] == 200
    if fault:
        demo_upstream.control("/_demo/keys", body={BAD: fault})
    request_id = f"pool-{case}-{uuid.uuid4().hex}"
    before = time.time()
    got_status, body = call(pool_proxy, protocol, stream, model, request_id)

    keys = [r["key"] for r in demo_upstream.requests(request_id)]
    names = {BAD: "bad", GOOD: "good", BAD_NET: "bad", GOOD_NET: "good"}
    assert [names[k] for k in keys] == expected_keys
    assert got_status == status, body
    if status != 200:  # the upstream's error, in the client's protocol, with the upstream's status
        assert error_type(protocol, body)
        if protocol == "messages":
            assert body["type"] == "error"
        if case == "context_length" and protocol == "messages":
            assert body["error"]["message"].startswith("prompt is too long")
    bad = account(pool_proxy, upstream, "bad")
    assert bad["status"] == state
    if case == "exhausted_429":
        assert bad["until"] == pytest.approx(before + 120, abs=5)  # Retry-After, not the default
    if case == "exhausted_402":
        assert bad["until"] == pytest.approx(before + 60, abs=5)  # the default cooldown
    if case == "auth_401":
        assert bad["reason"].startswith("auth_invalid: HTTP 401")
    if fault:  # whatever the action, the account says what its last attempt got
        last = bad["last_error"]
        assert last["at"] >= before and last["message"].startswith(f"{last['class']}: HTTP {fault['status']}")
    if case == "network":  # its only proxy refused: the proxy cools, the account is skipped, not blamed
        (proxy,) = bad["proxies"]
        assert proxy["status"] == "cooling" and proxy["reason"] == "refused the connection"
        assert "network" not in bad["failures"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_account_throttled_is_429_and_none_left_is_503_saying_why(
        pool_proxy: ProxyServer, demo_upstream: DemoUpstream, protocol: str) -> None:
    demo_upstream.control("/_demo/keys", method="DELETE")
    admin(pool_proxy, "POST", "/admin/accounts/main/bad/disable", {"reason": "maintenance"})
    demo_upstream.control("/_demo/keys", body={GOOD: {"status": 429, "headers": {"Retry-After": "90"}}})
    admin(pool_proxy, "POST", "/admin/accounts/main/good/enable")
    request_id = f"pool-429-{uuid.uuid4().hex}"
    status, body = call(pool_proxy, protocol, False, "pool-x", request_id)
    assert status == 429  # the one account that could serve is rate-limited: not an outage
    message = body["error"]["message"]
    assert message.startswith("Every account that could serve model 'pool-x' is rate-limited or busy: upstream "
                              "'main' has 2 account(s): 1 cooling, 1 disabled, 0 at max_concurrency")
    assert "admin: maintenance" in message and "returns in 9" in message and "failed with HTTP 429" in message
    assert [r["key"] for r in demo_upstream.requests(request_id)] == [GOOD]
    again = f"pool-429-{uuid.uuid4().hex}"
    assert call(pool_proxy, protocol, True, "pool-x", again)[0] == 429
    assert demo_upstream.requests(again) == []  # nothing in rotation: nothing sent
    admin(pool_proxy, "POST", "/admin/accounts/main/good/disable", {"reason": "maintenance"})
    status, body = call(pool_proxy, protocol, True, "pool-x", f"pool-503-{uuid.uuid4().hex}")
    assert status == 503 and body["error"]["message"].startswith(  # disabled is not throttled
        "No active account is available for model 'pool-x': upstream 'main' has 2 account(s): 0 cooling, 2 disabled")
    demo_upstream.control("/_demo/keys", method="DELETE")
    for name in ("bad", "good"):
        admin(pool_proxy, "POST", f"/admin/accounts/main/{name}/enable")


def test_sdks_raise_rate_limit_error_with_retry_after_when_every_account_cools(
        pool_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    demo_upstream.control("/_demo/keys", method="DELETE")
    demo_upstream.control("/_demo/keys", body={key: {"status": 429, "headers": {"Retry-After": "30"}}
                                               for key in (BAD, GOOD)})
    for name in ("bad", "good"):
        admin(pool_proxy, "POST", f"/admin/accounts/main/{name}/enable")
    chat = openai.OpenAI(base_url=f"{pool_proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0)
    with pytest.raises(openai.RateLimitError) as oa:  # both accounts answer 429 and cool
        chat.chat.completions.create(model="pool-x", messages=[{"role": "user", "content": "hi"}])
    assert 25 <= int(oa.value.response.headers["retry-after"]) <= 30
    assert oa.value.code == "all_accounts_rate_limited" and "2 cooling" in oa.value.message
    with pytest.raises(openai.RateLimitError) as resp:
        chat.responses.create(model="pool-x", input="hi")
    assert 1 <= int(resp.value.response.headers["retry-after"]) <= 30
    claude = anthropic.Anthropic(base_url=pool_proxy.url, api_key=CLIENT_KEY, max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as an, claude.messages.stream(
            model="pool-x", max_tokens=20, messages=[{"role": "user", "content": "hi"}]) as s:
        s.until_done()
    assert 1 <= int(an.value.response.headers["retry-after"]) <= 30
    assert an.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    demo_upstream.control("/_demo/keys", method="DELETE")
    for name in ("bad", "good"):
        admin(pool_proxy, "POST", f"/admin/accounts/main/{name}/enable")


def test_admin_api(pool_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    status, listing = admin(pool_proxy, "GET", "/admin/accounts")
    assert status == 200
    text = json.dumps(listing)
    for key in (BAD, GOOD, BAD_NET, GOOD_NET):
        assert key not in text
    main = account(pool_proxy, "main", "good")
    assert main["key"] == "…good" and main["requests"] >= 1
    assert admin(pool_proxy, "POST", "/admin/accounts/main", {"id": "extra", "api_key": "sk-pool-extra"})[0] == 201
    assert admin(pool_proxy, "POST", "/admin/accounts/main", {"id": "extra", "api_key": "x"})[0] == 409
    status, err = admin(pool_proxy, "POST", "/admin/accounts/main", {"id": "x"})
    assert status == 400 and err["error"]["message"] == "account.api_key: is required"
    assert admin(pool_proxy, "DELETE", "/admin/accounts/main/extra") == (200, {"upstream": "main", "id": "extra",
                                                                              "removed": True})
    assert admin(pool_proxy, "DELETE", "/admin/accounts/main/extra")[0] == 404
    assert admin(pool_proxy, "POST", "/admin/accounts/nope/bad/enable")[0] == 404
    client = request(pool_proxy.url, "GET", "/admin/accounts", headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert client.status == 401 and "admin key" in client.json()["error"]["message"]
    client.close()


def test_admin_is_off_without_admin_keys(proxy: ProxyServer) -> None:
    resp = request(proxy.url, "GET", "/admin/accounts", headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert resp.status == 403 and "admin API is disabled" in resp.json()["error"]["message"]
    resp.close()
