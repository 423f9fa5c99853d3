"""Model fallbacks, their bounds and upstream weights, on one live gunicorn + gevent proxy in front
of the scriptable demo upstream: a model whose accounts are all exhausted is answered by its
fallback (the client, whole and streamed, is told which model answered), a client's 400 is not
retried on another model, `max_attempts_total` bounds the upstream calls, a fallback over
`fallbacks_max_cost_ratio` or over a key's budget is skipped, a prompt too long goes to the
`context_window_fallbacks` model; and weights 3 : 1 split 1,000 requests 750 : 250. Each test counts
the calls that reached the upstream, by the account key each carried."""

from __future__ import annotations

import http.client
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.wire import request

ADMIN = "sk-admin-fallbacks"
BUDGETED = "sk-fallback-budgeted-0123456789"
O1, O2, S1, D1, C1, C2 = ("sk-fb-opus-1", "sk-fb-opus-2", "sk-fb-sonnet-1", "sk-fb-dear-1", "sk-fb-cheap-1",
                          "sk-fb-cheap-2")
WA, WB, WZ = "sk-fb-weight-a", "sk-fb-weight-b", "sk-fb-weight-zero"
NAMES = {O1: "o1", O2: "o2", S1: "s1", D1: "d1", C1: "c1", C2: "c2", WA: "wa", WB: "wb", WZ: "wz"}
EXHAUSTED = {"status": 429, "headers": {"Retry-After": "600"}}
TEXT = "hi [demo:pace=0] [demo:words=3]"


def upstream(name: str, protocol: str, serve: str, keys: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "protocol": protocol, "base_url": "", "models": {"serve": [serve]},
            "pool": {"probe": {"interval": 3600}, "policy": "round_robin"},
            "accounts": [{"id": NAMES[k], "api_key": k} for k in keys], **extra}


@pytest.fixture(scope="module")
def fb_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    upstreams = [
        upstream("opus", "chat_completions", "big-model", [O1, O2]),
        upstream("sonnet", "messages", "mid-model", [S1]),  # a fallback of another protocol: translated
        upstream("dear", "chat_completions", "dear-model", [D1]),
        upstream("cheap", "chat_completions", "cheap-model", [C1, C2]),
        upstream("wa", "chat_completions", "w-model", [WA], weight=3),
        upstream("wb", "chat_completions", "w-model", [WB]),
        upstream("wz", "chat_completions", "w-model", [WZ], weight=0),
    ]
    for u in upstreams:
        u["base_url"] = demo_upstream.url
    config = {
        "client_keys": [CLIENT_KEY, {"name": "budgeted", "key": BUDGETED, "budget": {"usd_total": 0.012}}],
        "admin_keys": [ADMIN], "upstreams": upstreams,
        "fallbacks": {"big-model": ["mid-model", "dear-model", "cheap-model"]},
        "context_window_fallbacks": {"big-*": ["cheap-model"]},
        "max_attempts_total": 4, "fallbacks_max_cost_ratio": 2,
        # USD per million tokens: mid is 1.5x big's output price (taken), dear 10x (skipped at a ratio of 2)
        "pricing": {"models": {"big-model": {"input": 1, "output": 10}, "mid-model": {"input": 1, "output": 15},
                               "dear-model": {"input": 1, "output": 100}, "cheap-model": {"input": 1, "output": 1},
                               "w-model": {"input": 1, "output": 1}}},
    }
    server = start_proxy(config, Path(tmp_path_factory.mktemp("fallbacks")))
    yield server
    stop_proxy(server)


@pytest.fixture(autouse=True)
def clean(fb_proxy: ProxyServer, demo_upstream: DemoUpstream) -> Iterator[None]:
    """Each test scripts its own faults and starts with every account back in rotation."""
    demo_upstream.control("/_demo/keys", method="DELETE")
    yield
    demo_upstream.control("/_demo/keys", method="DELETE")
    for up, ids in {"opus": ["o1", "o2"], "sonnet": ["s1"], "cheap": ["c1", "c2"], "dear": ["d1"]}.items():
        for account in ids:
            resp = request(fb_proxy.url, "POST", f"/admin/accounts/{up}/{account}/enable", {},
                           {"Authorization": f"Bearer {ADMIN}"})
            resp.close()


def reached(demo: DemoUpstream, rid: str) -> list[str]:
    """The accounts whose keys reached the upstream for request `rid`, in order."""
    return [NAMES[r["key"]] for r in demo.requests(rid)]


def chat(proxy: ProxyServer, rid: str, key: str = CLIENT_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0,
                         default_headers={"X-Request-Id": rid})


def test_every_account_exhausted_falls_back_and_the_client_is_told_which_model_answered(
        fb_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    demo_upstream.control("/_demo/keys", body={O1: EXHAUSTED, O2: EXHAUSTED})
    rid = f"fb-whole-{uuid.uuid4().hex}"
    raw = chat(fb_proxy, rid).chat.completions.with_raw_response.create(
        model="big-model", messages=[{"role": "user", "content": TEXT}])
    answer = raw.parse()
    calls = reached(demo_upstream, rid)
    assert sorted(calls[:2]) == ["o1", "o2"] and calls[2:] == ["s1"]
    assert answer.model == "mid-model" and raw.headers["x-llm-proxy-model"] == "mid-model"
    assert answer.choices[0].message.content
    sent = demo_upstream.requests(rid)[-1]
    assert sent["path"] == "/v1/messages" and sent["body"]["model"] == "mid-model"  # translated for its upstream

    # Streamed: the fallback is taken before the first byte, and every chunk names the model that answered.
    rid = f"fb-stream-{uuid.uuid4().hex}"
    with chat(fb_proxy, rid).chat.completions.with_streaming_response.create(
            model="big-model", messages=[{"role": "user", "content": TEXT}], stream=True) as resp:
        assert resp.headers["x-llm-proxy-model"] == "mid-model"
        chunks = list(resp.parse())
    assert chunks and {c.model for c in chunks} == {"mid-model"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # Both cooling accounts are skipped now: the fallback is the first call.
    assert reached(demo_upstream, rid) == ["s1"]

    admin = {"Authorization": f"Bearer {ADMIN}"}
    usage = request(fb_proxy.url, "GET", "/admin/usage?group_by=model,served_model,endpoint", headers=admin).json()
    served = {(g["model"], g["served_model"], g["endpoint"]): g["requests"] for g in usage["rows"]}
    assert served.get(("big-model", "mid-model", "chat_completions"), 0) >= 2  # the model asked for and the one that served
    recent = request(fb_proxy.url, "GET", "/admin/requests", headers=admin).json()
    (entry,) = [e for e in recent["data"] if e["request_id"] == rid]
    assert entry["model"] == "big-model" and entry["served_model"] == "mid-model"
    metrics = request(fb_proxy.url, "GET", "/metrics", headers=admin).body().decode()
    assert any('model="big-model"' in line and 'served_model="mid-model"' in line and 'endpoint="chat_completions"'
               in line for line in metrics.splitlines() if line.startswith("llm_proxy_requests_total"))
    assert "fallback rid=" in fb_proxy.log() and "from=big-model to=mid-model because=unserved" in fb_proxy.log()


def test_a_clients_400_is_not_retried_on_another_model(fb_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    demo_upstream.control("/_demo/keys", body={O1: {"status": 400, "body": {"error": {
        "message": "temperature: must be at most 2", "type": "invalid_request_error"}}}})
    rid = f"fb-400-{uuid.uuid4().hex}"
    with pytest.raises(openai.BadRequestError) as err:
        chat(fb_proxy, rid).chat.completions.create(model="big-model", messages=[{"role": "user", "content": TEXT}])
    assert "temperature" in err.value.message
    assert reached(demo_upstream, rid) == ["o1"]


def test_cost_ratio_skips_the_dear_fallback_and_max_attempts_total_caps_every_call(
        fb_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    demo_upstream.control("/_demo/keys", body={O1: EXHAUSTED, O2: EXHAUSTED, S1: EXHAUSTED})
    rid = f"fb-ratio-{uuid.uuid4().hex}"
    raw = chat(fb_proxy, rid).chat.completions.with_raw_response.create(
        model="big-model", messages=[{"role": "user", "content": TEXT}])
    assert raw.headers["x-llm-proxy-model"] == "cheap-model" and raw.parse().model == "cheap-model"
    calls = reached(demo_upstream, rid)
    assert sorted(calls[:2]) == ["o1", "o2"] and calls[2] == "s1" and calls[3] in ("c1", "c2")
    assert len(calls) == 4  # d1 never called
    assert "to=dear-model: its output price ($100/Mtok) is over fallbacks_max_cost_ratio (2)" in fb_proxy.log()

    for account in ("o1", "o2", "s1"):  # back in rotation, still exhausted: the whole chain fails
        request(fb_proxy.url, "POST", f"/admin/accounts/{'sonnet' if account == 's1' else 'opus'}/{account}/enable",
                {}, {"Authorization": f"Bearer {ADMIN}"}).close()
    demo_upstream.control("/_demo/keys", body={O1: EXHAUSTED, O2: EXHAUSTED, S1: EXHAUSTED, C1: EXHAUSTED,
                                               C2: EXHAUSTED})
    rid = f"fb-cap-{uuid.uuid4().hex}"
    with pytest.raises(openai.RateLimitError) as err:  # the requested model's failure: every account cooling
        chat(fb_proxy, rid).chat.completions.create(model="big-model", messages=[{"role": "user", "content": TEXT}])
    assert len(reached(demo_upstream, rid)) == 4  # max_attempts_total: c2 is never called
    assert "Every account that could serve model 'big-model' is rate-limited" in err.value.message
    assert "Its fallbacks failed too: 'mid-model' (HTTP 429), 'cheap-model' (HTTP 503)." in err.value.message
    assert "The request made 4 upstream calls, the most one may (max_attempts_total)" in err.value.message
    assert 500 <= int(err.value.response.headers["retry-after"]) <= 600


def test_a_fallback_the_budget_cannot_hold_is_skipped(fb_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    # The budget ($0.012) holds big-model's worst case (1,000 output tokens at $10/M: ~$0.010) but not
    # mid-model's (~$0.015): mid is skipped and cheap ($1/M) answers within what was held.
    demo_upstream.control("/_demo/keys", body={O1: EXHAUSTED, O2: EXHAUSTED})
    rid = f"fb-budget-{uuid.uuid4().hex}"
    answer = chat(fb_proxy, rid, BUDGETED).chat.completions.create(
        model="big-model", max_tokens=1000, messages=[{"role": "user", "content": TEXT}])
    assert answer.model == "cheap-model"
    calls = reached(demo_upstream, rid)
    assert sorted(calls[:2]) == ["o1", "o2"] and calls[2] in ("c1", "c2") and len(calls) == 3  # not s1
    assert "to=mid-model: the budget cannot hold its worst case" in fb_proxy.log()
    keys = request(fb_proxy.url, "GET", "/admin/keys", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    (budgeted,) = [k for k in keys["data"] if k["name"] == "budgeted"]
    total = budgeted["usd_budget"]["usd_total"]
    assert total["spent_usd"] + total["reserved_usd"] <= 0.012


def test_a_prompt_too_long_goes_to_the_context_window_fallback(fb_proxy: ProxyServer,
                                                                demo_upstream: DemoUpstream) -> None:
    too_long = {"status": 400, "body": {"error": {"message": "This model's maximum context length is 8192 tokens",
                                                  "code": "context_length_exceeded"}}}
    demo_upstream.control("/_demo/keys", body={O1: too_long, O2: too_long})
    rid = f"fb-long-{uuid.uuid4().hex}"
    answer = chat(fb_proxy, rid).chat.completions.create(model="big-model",
                                                          messages=[{"role": "user", "content": TEXT}])
    assert answer.model == "cheap-model"
    calls = reached(demo_upstream, rid)
    assert calls[0] in ("o1", "o2") and calls[1] in ("c1", "c2") and len(calls) == 2  # no other account of big


def test_weights_split_1000_requests_as_configured(fb_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    rid = f"fb-weights-{uuid.uuid4().hex}"
    host, port = fb_proxy.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    body = json.dumps({"model": "w-model", "max_tokens": 5, "messages": [{"role": "user", "content": TEXT}]})
    for _ in range(1000):
        conn.request("POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {CLIENT_KEY}",
                                                            "Content-Type": "application/json", "X-Request-Id": rid})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200
    conn.close()
    split = Counter(reached(demo_upstream, rid))
    assert sum(split.values()) == 1000 and "wz" not in split  # weight 0: only when the others fail
    assert abs(split["wa"] / 1000 - 0.75) <= 0.05, split

    demo_upstream.control("/_demo/keys", body={WA: EXHAUSTED, WB: EXHAUSTED})
    rid = f"fb-weight-zero-{uuid.uuid4().hex}"
    request(fb_proxy.url, "POST", "/v1/chat/completions", json.loads(body),
            {"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": rid}).close()
    assert reached(demo_upstream, rid)[-1] == "wz"
