"""The demo's own configuration in front of the simulated upstream, as `llm-proxy demo` runs it:
`[demo:status=429]` fails the first account tried only, so the client sees the pool fail over and
the demo stays usable; a directive the simulated upstream cannot follow is a 400 that says why,
in each protocol's envelope, never a dropped connection."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
import yaml
from openai import BadRequestError, OpenAI, RateLimitError

from proxy.demo.scenarios import ANSWER
from proxy.serving.cli import DEMO_CLIENT_KEY, demo_config
from tests import audit
from tests.conftest import DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.wire import request

DEMO_ADMIN_KEY = "sk-demo-admin-test"
DEMO_KEYS = ("sk-demo-upstream-1", "sk-demo-upstream-2")
ACCOUNT_OF = {"sk-demo-upstream-1": "demo-1", "sk-demo-upstream-2": "demo-2"}


@pytest.fixture(scope="module")
def demo_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    tmp = Path(tmp_path_factory.mktemp("demo"))
    config = yaml.safe_load(demo_config(demo_upstream.url, str(tmp / "state.db"), "chat_completions", DEMO_ADMIN_KEY))
    server = start_proxy(config, tmp)
    yield server
    stop_proxy(server)


def openai_client(server: ProxyServer) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key=DEMO_CLIENT_KEY, max_retries=0, timeout=30)


def test_status_429_fails_over_to_the_next_account_and_the_demo_stays_usable(
        demo_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    rid = f"failover-{uuid.uuid4().hex}"
    answer = openai_client(demo_proxy).chat.completions.create(
        model="demo-model", extra_headers={"X-Request-Id": rid},
        messages=[{"role": "user", "content": "Hello! [demo:status=429] [demo:pace=0]"}])
    assert (answer.choices[0].message.content or "").split() == ANSWER.split()
    first, second = [r["key"] for r in demo_upstream.requests(rid)]
    assert {first, second} == set(DEMO_KEYS)  # the first account was refused, the other one answered

    resp = request(demo_proxy.url, "GET", "/admin/accounts", None, {"Authorization": f"Bearer {DEMO_ADMIN_KEY}"})
    (demo,) = resp.json()["upstreams"]
    resp.close()
    cooling = {a["id"]: a for a in demo["accounts"] if a["status"] == "cooling"}
    assert list(cooling) == [ACCOUNT_OF[first]]
    (cooled,) = cooling.values()
    assert cooled["reason"].startswith("exhausted") and cooled["until"] - cooled["since"] == pytest.approx(10, abs=1)

    after = f"after-{uuid.uuid4().hex}"
    stream = openai_client(demo_proxy).chat.completions.create(
        model="demo-model", stream=True, extra_headers={"X-Request-Id": after},
        messages=[{"role": "user", "content": "Hello again [demo:pace=0]"}])
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).split() == ANSWER.split()
    assert [r["key"] for r in demo_upstream.requests(after)] == [second]


def test_a_malformed_directive_is_a_400_that_says_why(demo_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    rid = f"malformed-{uuid.uuid4().hex}"
    with pytest.raises(BadRequestError) as bad:
        openai_client(demo_proxy).chat.completions.create(
            model="demo-model", extra_headers={"X-Request-Id": rid},
            messages=[{"role": "user", "content": "hi [demo:words=abc]"}])
    assert bad.value.body["message"] == ("demo upstream: [demo:words=abc]: words takes a whole number, "  # type: ignore[index]
                                         "like =20")
    assert len(demo_upstream.requests(rid)) == 1  # a 400 is not retried on another account

    claude = anthropic.Anthropic(base_url=demo_proxy.url, api_key=DEMO_CLIENT_KEY, max_retries=0, timeout=30)
    with pytest.raises(anthropic.BadRequestError) as unknown:
        claude.messages.create(model="demo-model", max_tokens=50,
                               messages=[{"role": "user", "content": "hi [demo:reasonig]"}])
    message = unknown.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith("demo upstream: [demo:reasonig] is not a demo directive; the known ones are ")
    assert "reasoning" in message


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
@pytest.mark.parametrize("directive", ["[demo:pace=fast]", "[demo:status=200]", "[demo:hang=-1]", "[demo:chain=x]"])
def test_every_face_of_the_simulated_upstream_answers_a_bad_directive_with_400(
        demo_upstream: DemoUpstream, path: str, directive: str) -> None:
    text = f"hi {directive}"
    body = {"model": "demo-model", "max_tokens": 20, "input": text, "messages": [{"role": "user", "content": text}]}
    if path != "/v1/messages":
        body.pop("max_tokens")
    if path == "/v1/responses":
        body.pop("messages")
    else:
        body.pop("input")
    audit.register(["sk-demo-direct"])
    resp = request(demo_upstream.root, "POST", path, body, {"Authorization": "Bearer sk-demo-direct"})
    doc = resp.json()
    resp.close()
    assert resp.status == 400
    message = doc["error"]["message"]
    assert message.startswith(f"demo upstream: {directive.rstrip(']')}]: "), message
    if path == "/v1/messages":
        assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"


def test_the_demo_shows_what_its_requests_cost(demo_proxy: ProxyServer) -> None:
    """The demo config prices its models (demo prices, `pricing:` — $3 in, $15 out per million), so
    /admin/usage shows spend: exactly the usage the client saw, at those prices."""
    model = "demo-cost-check"  # a name no other test of the shared demo server uses: one request in its row
    answer = openai_client(demo_proxy).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What does this cost? [demo:pace=0]"}])
    usage = answer.usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    details = usage.prompt_tokens_details
    assert details is None or not details.cached_tokens  # a short prompt: nothing read from a cache
    resp = request(demo_proxy.url, "GET", "/admin/usage?group_by=model,price_version", None,
                   {"Authorization": f"Bearer {DEMO_ADMIN_KEY}"})
    rows = {r["model"]: r for r in resp.json()["rows"]}
    resp.close()
    row = rows[model]
    assert row["price_version"] == "config" and row["cost_unknown_requests"] == 0 and row["requests"] == 1
    micros = usage.prompt_tokens * 3 + usage.completion_tokens * 15  # USD per million tokens = micro-dollars
    assert row["cost_usd"] == micros / 1e6


def test_the_demo_key_runs_into_its_daily_budget_with_costly_answers(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    config = yaml.safe_load(demo_config(demo_upstream.url, str(tmp_path / "state.db"), "chat_completions",
                                        DEMO_ADMIN_KEY))
    server = start_proxy(config, tmp_path)
    try:
        client = openai_client(server)
        costly = [{"role": "user", "content": "Write a novel. [demo:output=4000] [demo:pace=0] [demo:words=3]"}]
        answered = 0
        with pytest.raises(RateLimitError) as refused:
            for _ in range(10):
                answer = client.chat.completions.create(model="demo-model", messages=costly,  # type: ignore[arg-type]
                                                        max_tokens=4000)
                assert answer.usage is not None and answer.usage.completion_tokens == 4000  # $0.06 at $15/M
                answered += 1
        assert answered == 4  # $0.24 of the $0.25: a fifth's worst case does not fit
        assert refused.value.code == "insufficient_quota"
        said = refused.value.body["message"]  # type: ignore[index]
        assert said.startswith("The API key 'demo' would go over its usd_per_day budget ($0.25 a UTC day): $0.24")
        resp = request(server.url, "GET", "/admin/keys", None, {"Authorization": f"Bearer {DEMO_ADMIN_KEY}"})
        (demo,) = resp.json()["data"]
        assert demo["usd_budget"]["usd_per_day"]["spent_usd"] == pytest.approx(0.24, abs=0.001)
    finally:
        stop_proxy(server)
