"""Usage accounting on live servers, as operators and clients see it: figures exact to the token
across four gunicorn workers and a restart (requests of every client protocol, streamed or not, an
upstream error, a fail-over, a client that hangs up mid-stream, refused keys and models), the CSV
form, 400s that say what to fix, and the recent-requests list — without bodies, without keys.

Every upstream answer is scripted through the demo upstream's control API with its own token
counts, so what the totals must be is known from the test alone, not from what the proxy reports.
"""

from __future__ import annotations

import csv
import io
import json
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from proxy.blueprints.auth import key_name
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY
from tests.integration.test_pool_shared_state import eventually, workers_answering
from tests.wire import request

ALICE, BOB, GONE = "sk-usage-alice-0001", "sk-usage-bob-00001", "sk-usage-gone-0001"
UPSTREAM_KEYS = ("sk-usage-up-0", "sk-usage-up-1")  # and sk-usage-up-m, the Messages upstream's
NAMES = {ALICE: "alice", BOB: "bob", CLIENT_KEY: key_name(CLIENT_KEY)}
COUNTED = ("requests", "errors", "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")
SECRET_PROMPT = "the-prompt-text-must-not-be-listed"


def config(demo: DemoUpstream) -> dict[str, Any]:
    return {"client_keys": [CLIENT_KEY, {"name": "alice", "key": ALICE},
                            {"name": "bob", "key": BOB, "models": ["usage-*"]},
                            {"name": "gone", "key": GONE, "disabled": True}],
            "admin_keys": [ADMIN_KEY],
            "upstreams": [{"name": "anthropic", "protocol": "messages", "base_url": demo.url,
                           "models": {"serve": ["usage-m-*"]}, "pool": {"probe": {"interval": 3600}},
                           "accounts": [{"id": "acct-m", "api_key": "sk-usage-up-m"}]},
                          {"name": "main", "protocol": "chat_completions", "base_url": demo.url,
                           "pool": {"probe": {"interval": 3600}},
                           "accounts": [{"id": f"acct-{i}", "api_key": k} for i, k in enumerate(UPSTREAM_KEYS)]}]}


def admin_get(proxy: ProxyServer, path: str) -> tuple[int, str, str]:
    resp = request(proxy.url, "GET", path, None, {"Authorization": f"Bearer {ADMIN_KEY}"})
    out = resp.status, resp.headers.get("content-type", ""), resp.body().decode()
    resp.close()
    return out


def usage(proxy: ProxyServer, query: str) -> Any:
    status, _, text = admin_get(proxy, f"/admin/usage?{query}")
    assert status == 200, text
    return json.loads(text)


# ------------------------------------------------------------ scripted upstream answers


def usage_figures(n: int) -> dict[str, int]:
    """The token counts the upstream reports for request number n: all different, all known."""
    return {"input_tokens": 100 + 7 * n, "output_tokens": 11 + n, "cached_tokens": 3 * (n % 4),
            "reasoning_tokens": n % 3}


def chat_usage(figures: dict[str, int]) -> dict[str, Any]:
    return {"prompt_tokens": figures["input_tokens"], "completion_tokens": figures["output_tokens"],
            "total_tokens": figures["input_tokens"] + figures["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": figures["cached_tokens"]},
            "completion_tokens_details": {"reasoning_tokens": figures["reasoning_tokens"]}}


def chunk(model: str, choices: list[dict[str, Any]], **extra: Any) -> str:
    return "data: " + json.dumps({"id": "chatcmpl-usage", "object": "chat.completion.chunk", "created": 1,
                                  "model": model, "choices": choices, **extra}) + "\n\n"


def delta(content: str | None = None, finish: str | None = None) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": {"role": "assistant", "content": content} if content else {},
             "finish_reason": finish}]


def answer(model: str, figures: dict[str, int], stream: bool) -> dict[str, Any]:
    if not stream:
        body = {"id": "chatcmpl-usage", "object": "chat.completion", "created": 1, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "counted"},
                             "finish_reason": "stop"}], "usage": chat_usage(figures)}
        return {"status": 200, "body": json.dumps(body), "headers": {"Content-Type": "application/json"}}
    return {"steps": [{"send": chunk(model, delta("counted"))}, {"send": chunk(model, delta(finish="stop"))},
                      {"send": chunk(model, [], usage=chat_usage(figures))}, {"send": "data: [DONE]\n\n"}]}


def script(demo: DemoUpstream, request_id: str, *answers: dict[str, Any]) -> None:
    demo.control(f"/_demo/script?request_id={request_id}", body=list(answers))


# ------------------------------------------------------------ clients


def send(proxy: ProxyServer, protocol: str, stream: bool, key: str, model: str, request_id: str) -> None:
    """One request as each protocol's SDK sends it; a stream is read to its end."""
    headers = {"x-request-id": request_id}
    hi = [{"role": "user", "content": f"{SECRET_PROMPT} hi"}]
    if protocol == "messages":
        client = anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0, timeout=20)
        got = client.messages.create(model=model, max_tokens=50, messages=hi, stream=stream,  # type: ignore[arg-type]
                                     extra_headers=headers)
    else:
        oa = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0, timeout=20)
        if protocol == "chat_completions":
            got = oa.chat.completions.create(model=model, messages=hi, stream=stream,  # type: ignore[arg-type]
                                             extra_headers=headers)
        else:
            got = oa.responses.create(model=model, input=hi, stream=stream, extra_headers=headers)  # type: ignore[arg-type]
    if stream:
        for _ in got:  # type: ignore[union-attr]
            pass


class Expected:
    """What the usage figures must say, per (client key name, model), built from the scripts."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str | None], Counter[str]] = {}

    def count(self, key_name_: str, model: str | None, error: bool = False,
              figures: dict[str, int] | None = None) -> None:
        row = self.rows.setdefault((key_name_, model), Counter())
        row["requests"] += 1
        row["errors"] += int(error)
        for name, value in (figures or {}).items():
            row[name] += value

    def totals(self) -> dict[str, int]:
        return {name: sum(row[name] for row in self.rows.values()) for name in COUNTED}


def as_table(answer_: Any) -> dict[tuple[str, str | None], dict[str, int]]:
    return {(r["client_key"], r["model"]): {name: r[name] for name in COUNTED} for r in answer_["rows"]}


def expected_table(expected: Expected) -> dict[tuple[str, str | None], dict[str, int]]:
    return {k: {name: row[name] for name in COUNTED} for k, row in expected.rows.items()}


def hang_up_mid_stream(proxy: ProxyServer, demo: DemoUpstream, request_id: str) -> None:
    script(demo, request_id, {"steps": [{"send": chunk("usage-a", delta("partial"))}, {"hold": True}]})
    resp = request(proxy.url, "POST", "/v1/chat/completions",
                   {"model": "usage-a", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                   {"Authorization": f"Bearer {ALICE}", "X-Request-Id": request_id})
    assert resp.status == 200 and b"partial" in (resp.next_chunk() or b"")
    resp.close()  # gone mid-stream


def listed(proxy: ProxyServer, request_id: str) -> dict[str, Any] | None:
    """The request's entry in /admin/requests, once the server has finished it."""
    data = json.loads(admin_get(proxy, "/admin/requests")[2])["data"]
    return next((e for e in data if e["request_id"] == request_id), None)


# ------------------------------------------------------------ the exactness test


def test_usage_is_exact_to_the_token_across_four_workers_and_a_restart(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    started = time.time()
    cfg = config(demo_upstream)
    expected = Expected()
    plan = []
    kinds = [(p, s) for p in ("chat_completions", "messages", "responses") for s in (False, True)]
    for n in range(36):  # each protocol, streamed or not, for each of three keys and two models
        protocol, stream = kinds[n % 6]
        key = (ALICE, BOB, CLIENT_KEY)[n // 6 % 3]
        model = ("usage-a", "usage-b")[n // 18]
        plan.append((n, protocol, stream, key, model, f"usage-{n}-{uuid.uuid4().hex}"))
        expected.count(NAMES[key], model, figures=usage_figures(n))
    for n, _, stream, _, model, request_id in plan:
        script(demo_upstream, request_id, answer(model, usage_figures(n), stream))

    first = start_proxy(cfg, tmp_path, workers=4)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:  # new connections, spread over the four workers
            list(pool.map(lambda p: send(first, *p[1:]), plan))

        # An upstream error: one request, one error, no tokens.
        failing = "usage-error-" + uuid.uuid4().hex
        script(demo_upstream, failing, {"status": 500, "headers": {"Content-Type": "application/json"},
                                        "body": json.dumps({"error": {"message": "boom", "type": "server_error"}})})
        with pytest.raises(openai.InternalServerError):
            send(first, "chat_completions", False, ALICE, "usage-a", failing)
        expected.count("alice", "usage-a", error=True)

        # A fail-over: the first account is rate-limited, the second answers; its tokens count once.
        failover = "usage-failover-" + uuid.uuid4().hex
        script(demo_upstream, failover,
               {"status": 429, "headers": {"Content-Type": "application/json", "Retry-After": "1"},
                "body": json.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}})},
               answer("usage-b", usage_figures(100), True))
        send(first, "messages", True, BOB, "usage-b", failover)
        assert len(demo_upstream.requests(failover)) == 2
        expected.count("bob", "usage-b", figures=usage_figures(100))

        # Refused at the door: a model the key may not use, a disabled key, a request with no messages.
        with pytest.raises(anthropic.PermissionDeniedError):
            send(first, "messages", False, BOB, "demo-model", "usage-refused-" + uuid.uuid4().hex)
        expected.count("bob", "demo-model", error=True)
        with pytest.raises(openai.AuthenticationError):
            send(first, "chat_completions", True, GONE, "usage-a", "usage-gone-" + uuid.uuid4().hex)
        expected.count("gone", None, error=True)
        resp = request(first.url, "POST", "/v1/chat/completions", {"model": "usage-a"},
                       {"Authorization": f"Bearer {ALICE}"})
        assert resp.status == 400
        resp.close()
        expected.count("alice", None, error=True)

        # A client that hangs up mid-stream: the server sees it after the client is gone, so wait
        # until the request is listed as finished; the upstream reported no usage before it.
        hung = "usage-hangup-" + uuid.uuid4().hex
        hang_up_mid_stream(first, demo_upstream, hung)
        expected.count("alice", "usage-a")  # counted, not an error: the client chose to leave

        assert eventually(lambda: listed(first, hung) is not None)

        query = f"since={int(started) - 60}&group_by=client_key,model"
        before = usage(first, query)
        assert {k: before["totals"][k] for k in COUNTED} == expected.totals()
        assert as_table(before) == expected_table(expected)
        # Whichever worker answers, the answer is the same, and several workers do answer.
        def rows_and_worker() -> int:
            assert usage(first, query)["rows"] == before["rows"]
            return int(json.loads(admin_get(first, "/admin/accounts")[2])["worker"])

        assert len(workers_answering(rows_and_worker)) > 1
    finally:
        first.process.send_signal(signal.SIGTERM)  # graceful: workers flush what they hold, then exit
        first.process.wait(timeout=60)

    second = start_proxy(cfg, tmp_path, workers=4)  # the same state file
    try:
        after = usage(second, f"since={int(started) - 60}&group_by=client_key,model")
        assert after["rows"] == before["rows"] and after["totals"] == before["totals"]
        # And it goes on counting from there.
        more = "usage-after-" + uuid.uuid4().hex
        script(demo_upstream, more, answer("usage-a", usage_figures(7), False))
        send(second, "responses", False, CLIENT_KEY, "usage-a", more)
        expected.count(NAMES[CLIENT_KEY], "usage-a", figures=usage_figures(7))
        final = usage(second, f"since={int(started) - 60}&group_by=client_key,model")
        assert {k: final["totals"][k] for k in COUNTED} == expected.totals()
        assert as_table(final) == expected_table(expected)
        print(f"\nusage exactness: {expected.totals()} over 4 workers and a restart")
    finally:
        stop_proxy(second)


# ------------------------------------------------------------ the endpoints


@pytest.fixture(scope="module")
def counted(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    server = start_proxy(config(demo_upstream), Path(tmp_path_factory.mktemp("usage")), workers=2)
    yield server
    stop_proxy(server)


def test_csv_and_buckets_give_the_same_figures(counted: ProxyServer, demo_upstream: DemoUpstream) -> None:
    for n, (protocol, key) in enumerate([("chat_completions", ALICE), ("messages", BOB), ("responses", ALICE)]):
        request_id = "usage-csv-" + uuid.uuid4().hex
        script(demo_upstream, request_id, answer("usage-c", usage_figures(n), n == 1))
        send(counted, protocol, n == 1, key, "usage-c", request_id)
    query = "group_by=client_key,model,stream"
    rows = usage(counted, query)["rows"]
    status, content_type, text = admin_get(counted, f"/admin/usage?{query}&format=csv")
    assert status == 200 and content_type.startswith("text/csv")
    header, *lines = list(csv.reader(io.StringIO(text)))
    assert header[:6] == ["client_key", "model", "stream", "requests", "errors", "input_tokens"]
    dollars = ("cost_usd", "cache_saved_usd")  # six decimals in CSV (0.011340), the shortest number in JSON
    assert [{k: v for k, v in zip(header, line, strict=True) if k not in dollars} for line in lines] == [
        {name: "" if r[name] is None else str(r[name]).lower() if isinstance(r[name], bool) else str(r[name])
         for name in header if name not in dollars} for r in rows]
    assert [[Decimal(line[header.index(k)]) for k in dollars] for line in lines] == [
        [Decimal(str(r[k])) for k in dollars] for r in rows]
    alice = [r for r in rows if r["client_key"] == "alice" and r["model"] == "usage-c"]
    assert sum(r["input_tokens"] for r in alice) == usage_figures(0)["input_tokens"] + \
        usage_figures(2)["input_tokens"]
    # By the endpoint each was called at and the model that served it (the one asked for: no fallback),
    # a value on every row, in JSON and in CSV.
    by_endpoint = usage(counted, "group_by=endpoint,served_model,model")["rows"]
    assert all(r["endpoint"] and r["served_model"] for r in by_endpoint)
    assert sorted((r["endpoint"], r["served_model"], r["requests"]) for r in by_endpoint if r["model"] == "usage-c") \
        == [("chat_completions", "usage-c", 1), ("messages", "usage-c", 1), ("responses", "usage-c", 1)]
    _, _, text = admin_get(counted, "/admin/usage?group_by=endpoint&format=csv")
    header, *lines = list(csv.reader(io.StringIO(text)))
    assert header[0] == "endpoint" and {"chat_completions", "messages", "responses"} <= {line[0] for line in lines}
    # The status page's charts: per-minute buckets, each row with its time.
    bucketed = usage(counted, "group_by=client_key&bucket=minute&since=" + str(int(time.time()) - 3600))
    assert bucketed["bucket"] == "minute" and all(r["time"].endswith(":00Z") for r in bucketed["rows"])
    assert sum(r["requests"] for r in bucketed["rows"]) == bucketed["totals"]["requests"] >= 3


@pytest.mark.parametrize(("query", "message"), [
    ("group_by=client_key,nope", "group_by: 'nope' is not something usage is grouped by"),
    ("since=yesterday", "since: must be ISO 8601"),
    ("since=2026-02-01&until=2026-01-01", "since: must be earlier than until"),
    ("bucket=week", "bucket: must be one of minute, hour, day"),
    ("format=xml", "format: must be json or csv"),
    ("groupby=model", "groupby: unknown parameter"),
])
def test_bad_usage_parameters_get_a_400_that_says_what_to_fix(counted: ProxyServer, query: str,
                                                               message: str) -> None:
    status, content_type, text = admin_get(counted, f"/admin/usage?{query}")
    assert (status, content_type) == (400, "application/json")
    error = json.loads(text)["error"]
    assert error["message"].startswith(message) and error["type"] == "invalid_request_error"


def test_usage_and_requests_need_an_admin_key(counted: ProxyServer) -> None:
    for path in ("/admin/usage", "/admin/requests"):
        resp = request(counted.url, "GET", path, None, {"Authorization": f"Bearer {ALICE}"})
        assert resp.status == 401 and "admin key" in resp.json()["error"]["message"]
        resp.close()


def test_recent_requests_are_listed_newest_first_without_bodies_or_keys(
        counted: ProxyServer, demo_upstream: DemoUpstream) -> None:
    ids = []
    for n, (protocol, stream) in enumerate([("chat_completions", True), ("messages", False), ("responses", True)]):
        request_id = "usage-recent-" + uuid.uuid4().hex
        script(demo_upstream, request_id, answer("usage-r", usage_figures(n), stream))
        send(counted, protocol, stream, ALICE, "usage-r", request_id)
        ids.append(request_id)
    status, _, text = admin_get(counted, "/admin/requests?limit=3")
    assert status == 200
    data = json.loads(text)["data"]
    assert [e["request_id"] for e in data] == ids[::-1]
    assert set(data[0]) >= {"request_id", "time", "client_key", "client_protocol", "model", "upstream", "account",
                            "stream", "status", "outcome", "first_byte_ms", "duration_ms", "input_tokens",
                            "output_tokens"}
    assert [(e["client_protocol"], e["stream"], e["client_key"], e["upstream"], e["status"], e["outcome"])
            for e in data] == [("responses", True, "alice", "main", 200, "ok"), ("messages", False, "alice", "main",
                                                                                 200, "ok"),
                               ("chat_completions", True, "alice", "main", 200, "ok")]
    assert [(e["endpoint"], e["served_model"]) for e in data] == [
        ("responses", None), ("messages", None), ("chat_completions", None)]
    assert [(e["input_tokens"], e["output_tokens"]) for e in data[::-1]] == [
        (usage_figures(n)["input_tokens"], usage_figures(n)["output_tokens"]) for n in range(3)]
    assert all(e["duration_ms"] >= e["first_byte_ms"] >= 0 for e in data)
    assert SECRET_PROMPT not in text and "counted" not in text  # no bodies, either way
    assert not any(secret in text for secret in (ALICE, BOB, CLIENT_KEY, *UPSTREAM_KEYS, "sk-usage-up-m"))
    for bad in ("limit=0", "limit=1001", "limit=ten", "limt=5"):
        status, _, text = admin_get(counted, f"/admin/requests?{bad}")
        assert status == 400 and json.loads(text)["error"]["message"].startswith(("limit:", "limt:"))


def anthropic_event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"


def test_a_client_that_hangs_up_mid_stream_is_counted_with_the_tokens_reported_so_far(
        counted: ProxyServer, demo_upstream: DemoUpstream) -> None:
    """An Anthropic upstream reports the prompt's tokens in its first event; the client leaves after
    the first words, while the upstream is still generating: the request is counted once, with
    those tokens, as client_gone — not as an error."""
    request_id = "usage-hangup-m-" + uuid.uuid4().hex
    model = "usage-m-" + uuid.uuid4().hex[:8]  # a model no other test uses: its figures are this request's
    start = {"message": {"id": "msg_usage", "type": "message", "role": "assistant", "model": model, "content": [],
                         "stop_reason": None, "stop_sequence": None,
                         "usage": {"input_tokens": 321, "cache_read_input_tokens": 40, "output_tokens": 1}}}
    script(demo_upstream, request_id, {"steps": [
        {"send": anthropic_event("message_start", start)},
        {"send": anthropic_event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})},
        {"send": anthropic_event("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                                                "text": "partial"}})},
        {"hold": True}]})
    resp = request(counted.url, "POST", "/v1/chat/completions",
                   {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                   {"Authorization": f"Bearer {ALICE}", "X-Request-Id": request_id})
    assert resp.status == 200
    seen = b""
    while b"partial" not in seen:
        piece = resp.next_chunk()
        assert piece is not None, seen
        seen += piece
    resp.close()  # gone mid-stream, the upstream still holding
    assert len(demo_upstream.requests(request_id)) == 1

    # The server sees the hang-up on its own time: wait until it lists the request as finished.
    assert eventually(lambda: listed(counted, request_id) is not None)
    entry = listed(counted, request_id)
    assert entry is not None
    assert (entry["outcome"], entry["status"], entry["upstream"], entry["account"], entry["input_tokens"]) == (
        "client_gone", 200, "anthropic", "acct-m", 361)
    figures = usage(counted, f"group_by=client_key,model,upstream,account,outcome&since={int(time.time()) - 3600}")
    (row,) = [r for r in figures["rows"] if r["model"] == model]
    assert {k: row[k] for k in ("client_key", "upstream", "account", "outcome", *COUNTED)} == {
        "client_key": "alice", "upstream": "anthropic", "account": "acct-m", "outcome": "client_gone",
        "requests": 1, "errors": 0, "input_tokens": 361, "output_tokens": 1, "cached_tokens": 40,
        "reasoning_tokens": 0}
