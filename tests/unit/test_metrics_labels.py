"""Metric label values stay bounded and never hold a key (proxy/ops/metrics.py): a client can send
any model name, but only names the router serves get series of their own, up to a limit per
worker; the rest count as "other"."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from proxy.config import parse
from proxy.ir.response import Usage
from proxy.ops import metrics as metrics_module
from proxy.ops.metrics import MAX_MODEL_NAME, MAX_MODELS, LiveGauges, Metrics, render
from proxy.ops.records import RequestRecord
from proxy.pool.pool import AccountPool
from proxy.routing import Router

CONFIG = parse({"client_keys": ["sk-client-unit"], "upstreams": [{
    "name": "main", "protocol": "chat_completions", "base_url": "http://127.0.0.1:1/v1",
    "models": {"serve": ["demo-*"], "aliases": {"short": "demo-long-name"}},
    "accounts": [{"id": "acct-1", "api_key": "sk-upstream-unit-1"}]}]})


def counted() -> tuple[Metrics, LiveGauges]:
    assert metrics_module.multiprocess_dir() is None  # this process's own registry
    router = Router(CONFIG.upstreams)
    live = LiveGauges()
    return Metrics(live, lambda model: bool(router.resolve(model))), live


def done(model: str, client_key: str = "alice") -> RequestRecord:
    record = RequestRecord("req_1", client_key, "chat_completions", model, stream=False, upstream="main",
                           account="acct-1")
    record.finish(200, "ok", Usage(input_tokens=10, output_tokens=4, cache_read_tokens=3, reasoning_tokens=1))
    return record


def samples(live: LiveGauges, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    pools = {u.name: AccountPool(u) for u in CONFIG.upstreams}
    text = render(live, pools, None)[0].decode()
    return {tuple(sorted(s.labels.items())): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name}


def test_served_names_are_labels_and_anything_else_is_other() -> None:
    metrics, _ = counted()
    assert metrics.model_label("demo-model") == "demo-model"
    assert metrics.model_label("short") == "short"  # an alias is served
    assert metrics.model_label("gpt-4o") == "other"  # no upstream serves it
    assert metrics.model_label("") == "other"
    assert metrics.model_label("demo-" + "x" * MAX_MODEL_NAME) == "other"


def test_after_the_limit_new_names_are_other_and_known_ones_keep_their_label() -> None:
    metrics, _ = counted()
    names = [f"demo-{i}" for i in range(MAX_MODELS)]
    assert [metrics.model_label(n) for n in names] == names
    assert metrics.model_label("demo-one-too-many") == "other"
    assert metrics.model_label(names[0]) == names[0]


def test_a_request_counts_its_tokens_by_kind_under_its_key_name() -> None:
    metrics, live = counted()
    metrics.request_done(done("demo-model"))
    metrics.request_done(done("gpt-unknown"))
    tokens = samples(live, "llm_proxy_tokens_total")
    base = (("client_key", "alice"), ("model", "demo-model"))
    assert {kind: tokens[tuple(sorted((*base, ("kind", kind), ("upstream", "main"))))]
            for kind in ("input", "output", "cached", "reasoning")} == {
        "input": 10, "output": 4, "cached": 3, "reasoning": 1}
    requests = samples(live, "llm_proxy_requests_total")
    assert requests[(("client_protocol", "chat_completions"), ("endpoint", "chat_completions"), ("model", "other"),
                     ("outcome", "ok"), ("served_model", "other"), ("upstream", "main"))] == 1
    text = render(live, {}, None)[0].decode()
    assert "gpt-unknown" not in text and "sk-" not in text


def test_requests_and_timings_carry_the_endpoint_and_the_model_that_served() -> None:
    """`endpoint` beside `client_protocol` (the protocol's name when the edge named none);
    `served_model` the fallback's model through the same bounded labels, else the model asked for."""
    metrics, live = counted()
    plain = done("demo-model")
    plain.endpoint = "chat_completions"
    fell_back = done("demo-big")
    fell_back.endpoint, fell_back.served_model = "chat_completions", "demo-small"
    unserved = done("demo-big")
    unserved.endpoint, unserved.served_model = "embeddings", "gpt-unserved"
    unnamed = done("demo-model")  # an edge that names no endpoint
    for record in (plain, fell_back, unserved, unnamed):
        metrics.request_done(record)
    requests = samples(live, "llm_proxy_requests_total")
    assert {(dict(labels)["endpoint"], dict(labels)["model"], dict(labels)["served_model"]): value
            for labels, value in requests.items()} == {
        ("chat_completions", "demo-model", "demo-model"): 2, ("chat_completions", "demo-big", "demo-small"): 1,
        ("embeddings", "demo-big", "other"): 1}
    for histogram in ("llm_proxy_time_to_first_byte_seconds_count", "llm_proxy_request_duration_seconds_count"):
        counts = samples(live, histogram)
        assert {dict(labels)["endpoint"]: value for labels, value in counts.items()} == {
            "chat_completions": 3, "embeddings": 1}
