"""What requests cost, as operators see it through live servers: `/admin/usage`'s `cost_usd` equals,
to the micro-dollar, the sum computed here independently — genai-prices' own `calc_price` for
real model names on upstreams that say their provider, the config's prices (Decimal arithmetic
written out below) for a self-hosted model and for an override that wins over genai-prices — over
a concurrent burst of streamed and whole requests of the three client protocols (the real openai
and anthropic SDKs) through upstreams of the three protocols, with cached, cache-write (5-minute
and 1-hour) and reasoning tokens. Through four gevent workers on SQLite, and through two hosts on
one real Redis. A model with no price is served and counted in `cost_unknown_requests` and in
`/metrics`, never as 0.

Every upstream answer is scripted through the demo upstream's control API with its own usage, so
what the totals must be is known from the test alone.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.integration.test_metrics import scrape, value
from tests.integration.test_pool import ADMIN_KEY
from tests.integration.test_usage import chunk, delta, script, send
from tests.wire import request

pytestmark = pytest.mark.live

TEAM = "sk-cost-team-00001"
# Client model → (upstream, its protocol, provider): real names priced by genai-prices, a
# self-hosted model priced by the config, an override, and a model nobody prices.
ROUTES = {"gpt-4o": ("oai", "openai"), "claude-sonnet-4-5-20250929": ("ant", "anthropic"),
          "gpt-5": ("resp", "openai"), "gpt-4o-mini": ("oai", "openai"), "house-model": ("house", None),
          "mystery-model": ("house", None)}
PROTOCOL = {"oai": "chat_completions", "ant": "messages", "resp": "responses", "house": "chat_completions"}
HOUSE = {"input": "0.5", "output": "1.5", "cached_input": "0.05", "cache_write": "0.625", "cache_write_1h": "1"}
OVERRIDE = {"input": "1", "output": "2", "cached_input": "0.25", "cache_write": "1.25", "cache_write_1h": "2"}
CLIENTS = [(p, s) for p in ("chat_completions", "messages", "responses") for s in (False, True)]


def config(demo: DemoUpstream, **extra: Any) -> dict[str, Any]:
    def upstream(name: str, models: list[str], **more: Any) -> dict[str, Any]:
        return {"name": name, "protocol": PROTOCOL[name], "base_url": demo.url, "models": {"serve": models},
                "pool": {"probe": {"interval": 3600}}, "accounts": [{"id": f"{name}-1", "api_key": f"sk-cost-{name}"}],
                **more}

    return {"client_keys": [CLIENT_KEY, {"name": "team", "key": TEAM}], "admin_keys": [ADMIN_KEY],
            "pricing": {"models": {"house-*": {k: float(v) for k, v in HOUSE.items()}}},
            "upstreams": [upstream("oai", ["gpt-4o", "gpt-4o-mini"], provider="openai",
                                   pricing={"models": {"gpt-4o-mini": {k: float(v) for k, v in OVERRIDE.items()}}}),
                          upstream("ant", ["claude-sonnet-4-5-20250929"], provider="anthropic"),
                          upstream("resp", ["gpt-5"], provider="openai"),
                          upstream("house", ["house-model", "mystery-model"])], **extra}


# ------------------------------------------------------------ usage, as each upstream protocol reports it


def figures(n: int, protocol: str) -> dict[str, int]:
    """Request n's usage in the IR's terms: every prompt token in `input`, reasoning in `output`.
    Cache writes only where the protocol reports them (Anthropic), with a 1-hour share."""
    out = {"input": 1_000 + 137 * n, "cached": 64 * (n % 5), "output": 40 + 13 * n, "reasoning": 7 * (n % 4),
           "written": 0, "written_1h": 0}
    if protocol == "messages":
        out["written"] = 50 + 11 * (n % 3)
        out["written_1h"] = 20 * (n % 2)
    return out


def chat_answer(model: str, f: dict[str, int], stream: bool) -> dict[str, Any]:
    usage = {"prompt_tokens": f["input"], "completion_tokens": f["output"], "total_tokens": f["input"] + f["output"],
             "prompt_tokens_details": {"cached_tokens": f["cached"]},
             "completion_tokens_details": {"reasoning_tokens": f["reasoning"]}}
    if not stream:
        body = {"id": "chatcmpl-cost", "object": "chat.completion", "created": 1, "model": model, "usage": usage,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "priced"}, "finish_reason": "stop"}]}
        return {"status": 200, "body": json.dumps(body), "headers": {"Content-Type": "application/json"}}
    return {"steps": [{"send": chunk(model, delta("priced"))}, {"send": chunk(model, delta(finish="stop"))},
                      {"send": chunk(model, [], usage=usage)}, {"send": "data: [DONE]\n\n"}]}


def sse(name: str, data: dict[str, Any]) -> dict[str, str]:
    return {"send": f"event: {name}\ndata: {json.dumps(data)}\n\n"}


def messages_answer(model: str, f: dict[str, int], stream: bool) -> dict[str, Any]:
    usage = {"input_tokens": f["input"] - f["cached"] - f["written"], "cache_read_input_tokens": f["cached"],
             "cache_creation_input_tokens": f["written"],
             "cache_creation": {"ephemeral_5m_input_tokens": f["written"] - f["written_1h"],
                                "ephemeral_1h_input_tokens": f["written_1h"]},
             "output_tokens": f["output"]}
    message = {"id": "msg_cost", "type": "message", "role": "assistant", "model": model, "stop_reason": "end_turn",
               "stop_sequence": None, "content": [{"type": "text", "text": "priced"}], "usage": usage}
    if not stream:
        return {"status": 200, "body": json.dumps(message), "headers": {"Content-Type": "application/json"}}
    start = message | {"content": [], "stop_reason": None, "usage": usage | {"output_tokens": 1}}
    return {"steps": [
        sse("message_start", {"type": "message_start", "message": start}),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "text_delta", "text": "priced"}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                              "usage": {"output_tokens": f["output"]}}),
        sse("message_stop", {"type": "message_stop"})]}


def responses_answer(model: str, f: dict[str, int], stream: bool) -> dict[str, Any]:
    usage = {"input_tokens": f["input"], "input_tokens_details": {"cached_tokens": f["cached"]},
             "output_tokens": f["output"], "output_tokens_details": {"reasoning_tokens": f["reasoning"]},
             "total_tokens": f["input"] + f["output"]}
    item = {"type": "message", "id": "msg_cost", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "priced", "annotations": []}]}
    done = {"id": "resp_cost", "object": "response", "created_at": 1, "model": model, "status": "completed",
            "output": [item], "usage": usage}
    if not stream:
        return {"status": 200, "body": json.dumps(done), "headers": {"Content-Type": "application/json"}}
    return {"steps": [
        sse("response.created", {"type": "response.created", "sequence_number": 0,
                                 "response": done | {"status": "in_progress", "output": [], "usage": None}}),
        sse("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 1,
                                           "output_index": 0, "item": item | {"content": [], "status": "in_progress"}}),
        sse("response.content_part.added", {"type": "response.content_part.added", "sequence_number": 2,
                                            "output_index": 0, "content_index": 0, "item_id": "msg_cost",
                                            "part": {"type": "output_text", "text": "", "annotations": []}}),
        sse("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 3,
                                           "output_index": 0, "content_index": 0, "item_id": "msg_cost",
                                           "delta": "priced"}),
        sse("response.output_text.done", {"type": "response.output_text.done", "sequence_number": 4,
                                          "output_index": 0, "content_index": 0, "item_id": "msg_cost",
                                          "text": "priced"}),
        sse("response.content_part.done", {"type": "response.content_part.done", "sequence_number": 5,
                                           "output_index": 0, "content_index": 0, "item_id": "msg_cost",
                                           "part": item["content"][0]}),
        sse("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 6,
                                          "output_index": 0, "item": item}),
        sse("response.completed", {"type": "response.completed", "sequence_number": 7, "response": done})]}


ANSWERS = {"chat_completions": chat_answer, "messages": messages_answer, "responses": responses_answer}


# ------------------------------------------------------------ the price, computed here


def expected_micros(model: str, f: dict[str, int]) -> int | None:
    """The request's cost from the price table, independently of proxy/money: genai-prices' own
    calc_price for its models, the config's prices written out for the others."""
    _, provider = ROUTES[model]
    prices = {"house-model": HOUSE, "gpt-4o-mini": OVERRIDE}.get(model)
    if prices is not None:
        p = {k: Decimal(v) for k, v in prices.items()}
        uncached = f["input"] - f["cached"] - f["written"]
        total = (uncached * p["input"] + f["cached"] * p["cached_input"]
                 + (f["written"] - f["written_1h"]) * p["cache_write"] + f["written_1h"] * p["cache_write_1h"]
                 + f["output"] * p["output"])
        return int(total.quantize(Decimal(1), rounding=ROUND_HALF_UP))
    if provider is None:
        return None
    usage = genai_prices.Usage(input_tokens=f["input"], cache_read_tokens=f["cached"],
                               cache_write_tokens=f["written"], cache_write_1h_tokens=f["written_1h"],
                               output_tokens=f["output"])
    dollars = genai_prices.calc_price(usage, model, provider_id=provider).total_price
    return int((dollars * 1_000_000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


class Plan:
    """The burst: every client protocol, streamed and whole, for every model, twice over; each
    request's scripted answer and the cost it must come to."""

    def __init__(self, demo: DemoUpstream, tag: str) -> None:
        self.requests: list[tuple[str, bool, str, str, str]] = []  # protocol, stream, key, model, request id
        self.cost: Counter[str] = Counter()  # micro-dollars per model
        self.unknown: Counter[str] = Counter()  # requests of unknown cost per model
        self.tokens: dict[str, Counter[str]] = {model: Counter() for model in ROUTES}  # IR figures per model
        n = 0
        for model, (upstream, _) in ROUTES.items():
            for client, stream in CLIENTS * 2:
                n += 1
                f = figures(n, PROTOCOL[upstream])
                request_id = f"cost-{tag}-{n}"
                script(demo, request_id, ANSWERS[PROTOCOL[upstream]](model, f, stream))
                self.requests.append((client, stream, (TEAM, CLIENT_KEY)[n % 2], model, request_id))
                self.tokens[model].update(f)
                micros = expected_micros(model, f)
                if micros is None:
                    self.unknown[model] += 1
                else:
                    self.cost[model] += micros

    def send_all(self, servers: list[ProxyServer]) -> None:
        with ThreadPoolExecutor(max_workers=12) as pool:  # new connections, spread over workers (and hosts)
            list(pool.map(lambda i: send(servers[i % len(servers)], *self.requests[i]), range(len(self.requests))))


def usd(micros: int) -> Decimal:
    return Decimal(micros).scaleb(-6)


def usage_by_model(proxy: ProxyServer) -> dict[str, Any]:
    resp = request(proxy.url, "GET", "/admin/usage?group_by=model", None, {"Authorization": f"Bearer {ADMIN_KEY}"})
    text = resp.body().decode()
    resp.close()
    assert resp.status == 200, text
    return json.loads(text, parse_float=Decimal)  # the figures as written, not through a float


def check(plan: Plan, answer: dict[str, Any]) -> None:
    rows = {r["model"]: r for r in answer["rows"]}
    for model in ROUTES:
        assert (Decimal(rows[model]["cost_usd"]), rows[model]["cost_unknown_requests"]) == (
            usd(plan.cost[model]), plan.unknown[model]), model
        counted = plan.tokens[model]
        assert (rows[model]["input_tokens"], rows[model]["cached_tokens"], rows[model]["cache_write_tokens"],
                rows[model]["output_tokens"]) == (counted["input"], counted["cached"], counted["written"],
                                                  counted["output"]), model
    assert Decimal(answer["totals"]["cost_usd"]) == usd(sum(plan.cost.values()))
    assert answer["totals"]["cost_unknown_requests"] == sum(plan.unknown.values()) == 2 * len(CLIENTS)
    assert rows["mystery-model"]["cost_usd"] == 0 and rows["mystery-model"]["input_tokens"] > 0


def test_cost_is_exact_to_the_micro_dollar_across_four_workers(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    plan = Plan(demo_upstream, "sqlite")
    proxy = start_proxy(config(demo_upstream), tmp_path, workers=4)
    try:
        plan.send_all([proxy])
        answer = usage_by_model(proxy)
        check(plan, answer)
        # The override won: gpt-4o-mini was priced by the upstream's `pricing`, not genai-prices'.
        resp = request(proxy.url, "GET", "/admin/usage?group_by=model,price_version", None,
                       {"Authorization": f"Bearer {ADMIN_KEY}"})
        versions = {(r["model"], r["price_version"]) for r in resp.json()["rows"]}
        resp.close()
        table = f"genai-prices {genai_prices.__version__}"
        assert versions == {("gpt-4o", table), ("claude-sonnet-4-5-20250929", table), ("gpt-5", table),
                            ("gpt-4o-mini", "config"), ("house-model", "config"), ("mystery-model", None)}
        samples = scrape(proxy)
        assert value(samples, "llm_proxy_cost_unknown_requests_total", model="mystery-model") == plan.unknown[
            "mystery-model"]
        for model, micros in plan.cost.items():
            assert value(samples, "llm_proxy_cost_usd_total", model=model) == pytest.approx(micros / 1e6, rel=1e-9)
        assert value(samples, "llm_proxy_cache_saved_usd_total", upstream="ant") > 0
        print(f"\ncost exactness (SQLite, 4 workers): {len(plan.requests)} requests, cost_usd "
              f"{answer['totals']['cost_usd']} = {usd(sum(plan.cost.values()))} computed here, "
              f"{answer['totals']['cost_unknown_requests']} of unknown cost")
    finally:
        stop_proxy(proxy)


def test_cost_is_exact_across_two_hosts_on_one_redis(demo_upstream: DemoUpstream, redis_url: str,
                                                     tmp_path: Path) -> None:
    plan = Plan(demo_upstream, "redis")
    shared = config(demo_upstream, state={"backend": "redis", "url": redis_url, "prefix": "cost-test:"})
    servers = []
    try:
        for name in ("a", "b"):  # a state directory each, as two machines would have
            folder = tmp_path / name
            folder.mkdir()
            servers.append(start_proxy(json.loads(json.dumps(shared)), folder, workers=2))
        plan.send_all(servers)
        answers = [usage_by_model(server) for server in servers]
        for answer in answers:
            check(plan, answer)
        assert answers[0]["rows"] == answers[1]["rows"]
        print(f"\ncost exactness (two hosts, one Redis): {len(plan.requests)} requests, cost_usd "
              f"{answers[0]['totals']['cost_usd']} = {usd(sum(plan.cost.values()))} computed here")
    finally:
        for server in servers:
            stop_proxy(server)
