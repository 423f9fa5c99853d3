"""GET /metrics and GET /admin/status through live servers with two gunicorn workers: what the
counters, histograms and gauges say after known requests — whichever worker served each request
and whichever serves the scrape —, the account states, who may read them, that no key shows, and
that a worker killed with SIGKILL is marked dead while its counts stay."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from anthropic import Anthropic
from openai import OpenAI
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from proxy import __version__
from proxy.blueprints.auth import key_name
from tests import audit
from tests.conftest import CLIENT_KEY, ROOT, DemoUpstream, ProxyServer, listening_socket, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY, admin
from tests.integration.test_pool_shared_state import eventually
from tests.wire import RawResponse, request, sse_data

FLAKY, STEADY, SPARE = "sk-metrics-flaky", "sk-metrics-steady", "sk-metrics-spare"
SECRETS = (CLIENT_KEY, ADMIN_KEY, FLAKY, STEADY, SPARE)
CHAT = {"client_protocol": "chat_completions", "upstream": "main"}


def metrics_config(demo: DemoUpstream, **extra: Any) -> dict[str, Any]:
    # policy "balance": the richest account is tried first, so the flaky one is, until it cools.
    return {"client_keys": [CLIENT_KEY], "admin_keys": [ADMIN_KEY], **extra, "upstreams": [{
        "name": "main", "protocol": "chat_completions", "base_url": demo.url, "models": {"serve": ["demo-*"]},
        "pool": {"policy": "balance", "probe": {"interval": 3600}},
        "accounts": [{"id": "flaky", "api_key": FLAKY, "balance": 100}, {"id": "steady", "api_key": STEADY,
                                                                         "balance": 50},
                     {"id": "spare", "api_key": SPARE, "balance": 10}]}]}


@pytest.fixture(scope="module")
def metered(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    server = start_proxy(metrics_config(demo_upstream), tmp_path_factory.mktemp("metrics"), workers=2)
    yield server
    stop_proxy(server)
    demo_upstream.control("/_demo/keys", method="DELETE")


# ---------------------------------------------------------------- reading what the proxy says

def get(proxy: ProxyServer, path: str, key: str | None = ADMIN_KEY) -> tuple[int, str]:
    resp = request(proxy.url, "GET", path, None, {"Authorization": f"Bearer {key}"} if key else {})
    body = resp.body().decode()
    resp.close()
    for secret in SECRETS:  # the audit scans for upstream keys; client and admin keys must not show either
        assert secret not in body, f"{secret} in {path}"
    return resp.status, body


def scrape(proxy: ProxyServer) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, text = get(proxy, "/metrics")
    assert status == 200, text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)


def delta(before: dict[Any, float], after: dict[Any, float], name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def status_of(proxy: ProxyServer) -> dict[str, Any]:
    status, body = get(proxy, "/admin/status")
    assert status == 200, body
    parsed: dict[str, Any] = json.loads(body)
    return parsed


def openai_client(proxy: ProxyServer, request_id: str | None = None) -> OpenAI:
    headers = {"X-Request-Id": request_id} if request_id else None
    return OpenAI(base_url=f"{proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20, default_headers=headers)


def rid() -> str:
    return "metrics-" + uuid.uuid4().hex


# ---------------------------------------------------------------- counters and histograms

def test_known_requests_show_in_the_counters_and_histograms(metered: ProxyServer, demo_upstream: DemoUpstream) -> None:
    before = scrape(metered)
    whole = openai_client(metered).chat.completions.create(
        model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=3] [demo:pace=0]"}])
    chunks = list(openai_client(metered).chat.completions.create(
        model="demo-model", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "hi [demo:words=5] [demo:pace=0]"}]))
    streamed = chunks[-1].usage
    # An upstream that reports cached and reasoning tokens too: a scripted answer, exactly as sent.
    scripted = rid()
    demo_upstream.control(f"/_demo/script?request_id={scripted}", body=[{
        "status": 200, "headers": {"Content-Type": "application/json"}, "body": {
            "id": "chatcmpl-m", "object": "chat.completion", "created": 1, "model": "demo-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                      "prompt_tokens_details": {"cached_tokens": 60},
                      "completion_tokens_details": {"reasoning_tokens": 7}}}}])
    openai_client(metered, scripted).chat.completions.create(
        model="demo-model", messages=[{"role": "user", "content": "scripted"}])
    with Anthropic(base_url=metered.url, api_key=CLIENT_KEY, max_retries=0, timeout=20).messages.stream(
            model="demo-model", max_tokens=100,
            messages=[{"role": "user", "content": "hi [demo:words=4] [demo:pace=0]"}]) as stream:
        anthropic_usage = stream.get_final_message().usage
    after = scrape(metered)

    assert whole.usage is not None and streamed is not None
    assert delta(before, after, "llm_proxy_requests_total", **CHAT, model="demo-model", outcome="ok") == 3
    assert delta(before, after, "llm_proxy_requests_total", client_protocol="messages", upstream="main",
                 model="demo-model", outcome="ok") == 1
    # The endpoint each was called at, and the model that served (the one asked for: no fallback).
    assert delta(before, after, "llm_proxy_requests_total", endpoint="chat_completions",
                 served_model="demo-model") == 3
    assert delta(before, after, "llm_proxy_requests_total", endpoint="messages", served_model="demo-model") == 1
    tokens = {"client_key": key_name(CLIENT_KEY), "upstream": "main", "model": "demo-model"}
    assert delta(before, after, "llm_proxy_tokens_total", **tokens, kind="input") == (
        whole.usage.prompt_tokens + streamed.prompt_tokens + 100 + anthropic_usage.input_tokens)
    assert delta(before, after, "llm_proxy_tokens_total", **tokens, kind="output") == (
        whole.usage.completion_tokens + streamed.completion_tokens + 20 + anthropic_usage.output_tokens)
    assert delta(before, after, "llm_proxy_tokens_total", **tokens, kind="cached") == 60
    assert delta(before, after, "llm_proxy_tokens_total", **tokens, kind="reasoning") == 7
    for histogram in ("llm_proxy_time_to_first_byte_seconds", "llm_proxy_request_duration_seconds"):
        assert delta(before, after, f"{histogram}_count", **CHAT) == 3
        assert delta(before, after, f"{histogram}_count", client_protocol="messages", endpoint="messages",
                     upstream="main") == 1
        assert delta(before, after, f"{histogram}_bucket", **CHAT, le="+Inf") == 3
        assert delta(before, after, f"{histogram}_sum", **CHAT) > 0
    assert delta(before, after, "llm_proxy_upstream_attempts_total", upstream="main", outcome="ok") == 4


def test_a_failover_counts_both_attempts_and_one_request(metered: ProxyServer, demo_upstream: DemoUpstream) -> None:
    before = scrape(metered)
    error = {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit_exceeded"}}
    demo_upstream.control("/_demo/keys", body={FLAKY: {"status": 429, "times": 1, "body": json.dumps(error),
                                                       "headers": {"Content-Type": "application/json"}}})
    request_id = rid()
    try:
        answer = openai_client(metered, request_id).chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
    finally:
        demo_upstream.control("/_demo/keys", method="DELETE")
    assert answer.choices[0].message.content
    assert [r["key"] for r in demo_upstream.requests(request_id)] == [FLAKY, STEADY]
    after = scrape(metered)
    assert delta(before, after, "llm_proxy_upstream_attempts_total", upstream="main", account="flaky",
                 outcome="exhausted") == 1
    assert delta(before, after, "llm_proxy_upstream_attempts_total", upstream="main", account="steady",
                 outcome="ok") == 1
    assert delta(before, after, "llm_proxy_requests_total", **CHAT, model="demo-model", outcome="ok") == 1
    # The 429 cooled the account: every worker's scrape says so once the worker that saw it has
    # written it to the shared store (at once, from its keeper's greenlet).
    def cooling() -> bool:
        samples = scrape(metered)
        return [value(samples, "llm_proxy_account_state", upstream="main", account="flaky", state=s)
                for s in ("active", "cooling", "disabled")] == [0, 1, 0]

    assert eventually(cooling)


def test_a_model_no_upstream_serves_counts_as_other(metered: ProxyServer) -> None:
    before = scrape(metered)
    name = "gpt-unserved-" + uuid.uuid4().hex
    resp = request(metered.url, "POST", "/v1/chat/completions",
                   {"model": name, "messages": [{"role": "user", "content": "hi"}]},
                   {"Authorization": f"Bearer {CLIENT_KEY}"})
    assert resp.status == 404 and resp.json()["error"]["code"] == "model_not_found"
    resp.close()
    after = scrape(metered)
    assert delta(before, after, "llm_proxy_requests_total", client_protocol="chat_completions", upstream="none",
                 model="other", outcome="not_found") == 1
    assert not any(name in dict(labels).values() for _, labels in after)


# ---------------------------------------------------------------- gauges

def held_stream(proxy: ProxyServer, request_id: str) -> RawResponse:
    resp = request(proxy.url, "POST", "/v1/chat/completions",
                   {"model": "demo-model", "stream": True, "messages": [{"role": "user", "content": "[demo:hold]"}]},
                   {"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": request_id})
    assert resp.status == 200
    first = resp.next_chunk()  # the upstream holds right after its first chunk
    assert first is not None and sse_data(first)["choices"][0]["delta"]["role"] == "assistant"
    return resp


def test_the_active_streams_gauge_follows_a_held_stream(metered: ProxyServer, demo_upstream: DemoUpstream) -> None:
    assert value(scrape(metered), "llm_proxy_active_streams") == 0
    request_id = rid()
    resp = held_stream(metered, request_id)
    try:
        assert value(scrape(metered), "llm_proxy_active_streams") == 1  # whichever worker serves the scrape
        assert status_of(metered)["open_streams"] == 1
    finally:
        demo_upstream.control(f"/_demo/release?request_id={request_id}")
    assert resp.rest()[-1] == b"data: [DONE]\n\n"
    resp.close()
    # The stream closes (and the gauge drops) just after its last byte reaches the client.
    assert eventually(lambda: value(scrape(metered), "llm_proxy_active_streams") == 0)
    assert status_of(metered)["open_streams"] == 0


def test_account_state_follows_the_admin_api(metered: ProxyServer) -> None:
    assert admin(metered, "POST", "/admin/accounts/main/spare/disable", {"reason": "metrics test"})[0] == 200
    try:
        samples = scrape(metered)
        assert [value(samples, "llm_proxy_account_state", upstream="main", account="spare", state=s)
                for s in ("active", "cooling", "disabled")] == [0, 0, 1]
    finally:
        assert admin(metered, "POST", "/admin/accounts/main/spare/enable")[0] == 200
    samples = scrape(metered)
    assert [value(samples, "llm_proxy_account_state", upstream="main", account="spare", state=s)
            for s in ("active", "cooling", "disabled")] == [1, 0, 0]


def test_the_status_endpoint_describes_the_instance(metered: ProxyServer) -> None:
    assert eventually(lambda: status_of(metered)["workers"] == 2)  # each counts itself once its app is up
    status = status_of(metered)
    config_path = Path(status.pop("config"))
    assert status == {"open_streams": 0, "workers": 2, "version": __version__, "reloaded_at": None}
    assert config_path.is_absolute() and config_path.name == "config.yaml" and config_path.exists()


# ---------------------------------------------------------------- who may read them

def test_metrics_need_an_admin_key(metered: ProxyServer) -> None:
    for key in (None, CLIENT_KEY, "sk-wrong-key"):
        status, body = get(metered, "/metrics", key)
        assert status == 401, body
        assert "admin" in json.loads(body)["error"]["message"]
    assert get(metered, "/metrics")[0] == 200


def test_public_metrics_need_no_key(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    config = metrics_config(demo_upstream, metrics={"public": True})
    del config["admin_keys"]
    server = start_proxy(config, tmp_path, workers=2)
    try:
        status, text = get(server, "/metrics", key=None)
        assert status == 200 and "llm_proxy_account_state" in text
        assert get(server, "/admin/status", key=None)[0] == 403  # the admin API stays closed
    finally:
        stop_proxy(server)


# ---------------------------------------------------------------- a worker killed

def serve(config: dict[str, Any], tmp: Path, workers: int) -> ProxyServer:
    """The proxy started with `llm-proxy serve` (the tests' other servers run gunicorn -c)."""
    config.setdefault("state_path", str(tmp / "state.db"))
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    sock = listening_socket()
    log_path = tmp / "serve.log"
    audit.register((a["api_key"] for u in config["upstreams"] for a in u["accounts"]), log_path)
    (tmp / "run").mkdir(exist_ok=True)  # the instance directory goes here, where a test can look into it
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "proxy.serving.cli", "serve", "--config", str(path), "--bind",
             f"fd://{sock.fileno()}", "--workers", str(workers)],
            pass_fds=[sock.fileno()], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "LLM_PROXY_RUN_DIR": str(tmp / "run")})
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    return ProxyServer(url=url, process=proc, log_path=log_path)


def counted_by_worker(metrics_dir: str) -> dict[int, float]:
    """llm_proxy_requests_total per worker process, read from each one's own file."""
    out = {}
    for path in glob.glob(os.path.join(metrics_dir, "counter_*.db")):
        merged = MultiProcessCollector.merge([path])
        out[int(path.rsplit("_", 1)[1][:-3])] = sum(s.value for m in merged for s in m.samples
                                                    if s.name == "llm_proxy_requests_total")
    return out


def streams_by_worker(metrics_dir: str) -> dict[int, float]:
    out = {}
    for path in glob.glob(os.path.join(metrics_dir, "gauge_livesum_*.db")):
        merged = MultiProcessCollector.merge([path])
        out[int(path.rsplit("_", 1)[1][:-3])] = sum(s.value for m in merged for s in m.samples
                                                    if s.name == "llm_proxy_active_streams")
    return out


def test_a_killed_worker_is_marked_dead_and_its_counts_stay(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = serve(metrics_config(demo_upstream), tmp_path, workers=2)
    try:
        status_of(server)  # up: its master has made the instance directory
        (instance_dir,) = glob.glob(str(tmp_path / "run" / f"llm-proxy-{server.process.pid}-*"))
        metrics_dir = os.path.join(instance_dir, "metrics")
        # Requests until both workers have counted some (the kernel spreads connections between them).
        sent = 0
        while len([n for n in counted_by_worker(metrics_dir).values() if n]) < 2:
            assert sent < 200, "one worker took every connection"
            openai_client(server).chat.completions.create(
                model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=1] [demo:pace=0]"}])
            sent += 1
        assert value(scrape(server), "llm_proxy_requests_total") == sent

        request_id = rid()
        resp = held_stream(server, request_id)
        (holder,) = [pid for pid, n in streams_by_worker(metrics_dir).items() if n == 1]
        assert value(scrape(server), "llm_proxy_active_streams") == 1
        os.kill(holder, signal.SIGKILL)
        assert resp.rest() is not None  # the connection just ends
        resp.close()
        demo_upstream.control(f"/_demo/release?request_id={request_id}")

        # The master reaps the worker and drops its live gauges; a new worker takes its place.
        assert eventually(lambda: value(scrape(server), "llm_proxy_active_streams") == 0, seconds=30)
        assert eventually(lambda: status_of(server)["workers"] == 2, seconds=30)
        assert holder not in streams_by_worker(metrics_dir)
        samples = scrape(server)
        assert value(samples, "llm_proxy_requests_total") == sent  # the dead worker's counts stay
        assert counted_by_worker(metrics_dir)[holder] > 0
        assert status_of(server)["open_streams"] == 0
        openai_client(server).chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=1] [demo:pace=0]"}])
        assert value(scrape(server), "llm_proxy_requests_total") == sent + 1
    finally:
        stop_proxy(server)
    assert not os.path.exists(metrics_dir)  # the master removes its directory when it exits
