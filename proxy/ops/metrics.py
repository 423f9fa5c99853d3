"""Prometheus metrics: what the proxy counts of its requests, and the text `GET /metrics` serves.

Owns the metric names, their labels and how a record becomes samples:

  llm_proxy_requests_total{client_protocol,endpoint,upstream,model,     counter, one per request
                           served_model,outcome}
  llm_proxy_upstream_attempts_total{upstream,account,outcome}           counter, one per attempt
  llm_proxy_tokens_total{client_key,upstream,model,kind}                counter; kind = input, output,
                                                                        cached, reasoning
  llm_proxy_cost_usd_total{client_key,upstream,model}                   counter, dollars of known cost
  llm_proxy_cost_unknown_requests_total{client_key,upstream,model}      counter, requests with usage
                                                                        but no price
  llm_proxy_cache_saved_usd_total{client_key,upstream}                  counter, dollars cache reads saved
  llm_proxy_budget_alerts_total{subject,window}                         counter, one per budget window crossing
                                                                        its alert_at (subject: key:<name>, group:<name>)
  llm_proxy_time_to_first_byte_seconds{client_protocol,endpoint,upstream}  histogram (answered requests)
  llm_proxy_request_duration_seconds{client_protocol,endpoint,upstream}    histogram
  llm_proxy_active_streams                                              gauge, streams open now
  llm_proxy_workers                                                     gauge, worker processes alive
  llm_proxy_account_state{upstream,account,state}                       gauge, 1 for the current state
  llm_proxy_state_store_up{backend}                                     gauge, 1 while the shared state
                                                                        store answers this worker, 0 degraded

Under gunicorn every worker counts in files of its own (prometheus-client's multiprocess mode, in
the directory proxy/serving/observability.py gives each instance) and a scrape, whichever worker
serves it, sums them all: a dead worker's counts stay in the sums, its share of the two live
gauges is dropped when the master marks it dead. Without that directory (the app built in a test)
the counts are this process's. Account states are not counted at all: they are read from the pool
at scrape time, which every worker's pool follows through the shared store.

Label values are bounded, since each distinct value is a series kept for ever: upstreams and
accounts come from the config (and the admin API), outcomes from the error kinds and failure
classes, endpoints from the edge (each protocol's completion endpoint by the protocol's name,
`embeddings`, `responses_compact`), client keys are the keys' names (never a key). Models — the one
asked for, and the one that served (`served_model`: the same unless a fallback answered) — are
the names clients send, which are arbitrary: a name gets a series of its own only if the router
serves it, it is at most MAX_MODEL_NAME characters long and this worker has labelled fewer than
MAX_MODELS names so far; anything else counts as "other". A request that never reached an upstream has upstream "none".
Must not import Flask, requests or gevent.
"""

from __future__ import annotations

import glob
import os
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector

from proxy.ops.hooks import Hooks
from proxy.ops.records import AttemptRecord, RequestRecord
from proxy.pool.pool import AccountPool
from proxy.pool.state import ACTIVE, COOLING, DISABLED
from proxy.state.health import StoreHealth

MAX_MODELS = 100  # distinct model names labelled per worker; later ones count as "other"
MAX_MODEL_NAME = 128
OTHER_MODEL = "other"
NO_UPSTREAM = "none"
TTFB_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
ACCOUNT_STATES = (ACTIVE, COOLING, DISABLED)
ACTIVE_STREAMS, WORKERS = "llm_proxy_active_streams", "llm_proxy_workers"


def multiprocess_dir() -> str | None:
    """The directory this instance's workers count in, if there is one."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return path if path and os.path.isdir(path) else None


class _Source:
    """The counted metrics of one scrape: every worker's files, or this process's registry."""

    def __init__(self, path: str | None, registry: CollectorRegistry) -> None:
        self.path, self.registry = path, registry

    def collect(self) -> Iterable[Metric]:
        if self.path is None:
            return self.registry.collect()
        return _merge(glob.glob(os.path.join(self.path, "*.db")), accumulate=True)

    def live_gauges(self) -> dict[str, float]:
        """The live gauges summed over the instance's workers alive now."""
        if self.path is None:
            metrics: Iterable[Metric] = [m for m in self.registry.collect() if m.name in (ACTIVE_STREAMS, WORKERS)]
        else:
            metrics = _merge(glob.glob(os.path.join(self.path, "gauge_livesum_*.db")))
        return {m.name: sum(s.value for s in m.samples) for m in metrics}


def _merge(paths: list[str], accumulate: bool = False) -> Iterable[Metric]:
    """prometheus-client's merge of the workers' files, leaving out a file that cannot be read at
    this moment: one a worker starting now has created but not yet sized (empty: its header cannot
    be unpacked), or one the master has just removed for a worker that died. It is counted at the
    next scrape; a scrape must not fail for it."""
    try:
        return MultiProcessCollector.merge(paths, accumulate=accumulate)
    except (OSError, struct.error, ValueError):
        readable = []
        for path in paths:
            try:
                MmapedDict.read_all_values_from_file(path)
            except (OSError, struct.error, ValueError):
                continue
            readable.append(path)
        return MultiProcessCollector.merge(readable, accumulate=accumulate)


class _AccountStates:
    """`llm_proxy_account_state`, read from the pools when scraped."""

    def __init__(self, pools: Mapping[str, AccountPool]) -> None:
        self.pools = pools

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("llm_proxy_account_state", "The state of each upstream account: 1 for its "
                                   "current state (active, cooling, disabled), 0 for the others.",
                                   labels=["upstream", "account", "state"])
        now = time.time()
        for name, pool in self.pools.items():
            for state in pool.states():
                current = pool.view(state, now)["status"]  # a cooling account whose time is up is active
                for candidate in ACCOUNT_STATES:
                    family.add_metric([name, state.id, candidate], 1.0 if candidate == current else 0.0)
        yield family


class _StoreUp:
    """`llm_proxy_state_store_up`, read from the serving worker's `StoreHealth` when scraped."""

    def __init__(self, health: StoreHealth) -> None:
        self.health = health

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("llm_proxy_state_store_up", "1 while the shared state store (Redis, or the "
                                   "SQLite file) answers this worker; 0 while it is unreachable (degraded: "
                                   "routing on last known state, usage buffered).", labels=["backend"])
        family.add_metric([self.health.backend], 1.0 if self.health.up else 0.0)
        yield family


class _Scrape:
    def __init__(self, *collectors: _Source | _AccountStates | _StoreUp) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            yield from collector.collect()


class LiveGauges(Hooks):
    """Streams open now and workers alive, summed over the instance's workers: kept even with
    `metrics.enabled: false`, since GET /admin/status reports them."""

    def __init__(self) -> None:
        self.path = multiprocess_dir()
        # With a directory the values live in this worker's files and are read back from them;
        # a registry of its own otherwise, so that apps built side by side in one process (tests)
        # do not share series.
        self.registry = CollectorRegistry()
        registry = None if self.path else self.registry
        self.active_streams = Gauge(ACTIVE_STREAMS, "Streams open to clients now.", registry=registry,
                                    multiprocess_mode="livesum")
        self.workers = Gauge(WORKERS, "Worker processes of this instance alive now.", registry=registry,
                             multiprocess_mode="livesum")
        self.workers.set(1)
        self.source = _Source(self.path, self.registry)

    def stream_opened(self, record: RequestRecord) -> None:
        self.active_streams.inc()

    def stream_closed(self, record: RequestRecord) -> None:
        self.active_streams.dec()

    def open_streams(self) -> int:
        return self._live(ACTIVE_STREAMS)

    def worker_count(self) -> int:
        return self._live(WORKERS)

    def _live(self, gauge: str) -> int:
        """A live gauge summed over the workers alive now."""
        return int(self.source.live_gauges().get(gauge, 0))


class Metrics(Hooks):
    """The counters and histograms, from the records. `served(model)`: whether the router serves a
    client's model name (what earns it a label value of its own)."""

    def __init__(self, live: LiveGauges, served: Callable[[str], bool]) -> None:
        self.live, self.served = live, served
        registry = None if live.path else live.registry
        self.requests = Counter("llm_proxy_requests", "Requests answered, by how they ended (ok, client_gone, "
                                "or the error kind); served_model: the client model that answered (model unless "
                                "a fallback did).",
                                ["client_protocol", "endpoint", "upstream", "model", "served_model", "outcome"],
                                registry=registry)
        self.attempts = Counter("llm_proxy_upstream_attempts", "Attempts on upstream accounts, by outcome (ok, "
                                "or the failure class).", ["upstream", "account", "outcome"], registry=registry)
        self.tokens = Counter("llm_proxy_tokens", "Tokens the upstreams reported (kind: input, output, cached, "
                              "reasoning).", ["client_key", "upstream", "model", "kind"], registry=registry)
        self.cost = Counter("llm_proxy_cost_usd", "What requests cost, in US dollars, where the model's "
                            "price is known (proxy.money).", ["client_key", "upstream", "model"], registry=registry)
        self.cost_unknown = Counter("llm_proxy_cost_unknown_requests", "Requests with usage whose model has no "
                                    "known price (their cost is not in llm_proxy_cost_usd_total).",
                                    ["client_key", "upstream", "model"], registry=registry)
        self.cache_saved = Counter("llm_proxy_cache_saved_usd", "What reading prompts from the upstreams' caches "
                                   "saved, in US dollars: cached tokens * (input - cached input price).",
                                   ["client_key", "upstream"], registry=registry)
        self.ttfb = Histogram("llm_proxy_time_to_first_byte_seconds", "From a request's arrival to the first "
                              "byte of its answer (answered requests).", ["client_protocol", "endpoint", "upstream"],
                              buckets=TTFB_BUCKETS, registry=registry)
        self.duration = Histogram("llm_proxy_request_duration_seconds", "From a request's arrival to its end "
                                  "(a stream's last byte).", ["client_protocol", "endpoint", "upstream"],
                                  buckets=DURATION_BUCKETS, registry=registry)
        self.budget_alerts = Counter("llm_proxy_budget_alerts", "USD budget windows that crossed their alert_at "
                                     "share (subject: key:<name> or group:<name>).", ["subject", "window"],
                                     registry=registry)
        self.request_log_dropped = Counter("llm_proxy_request_log_dropped", "Requests the request log did not keep "
                                           "or pushed out (reason: size_bound — the oldest, over max_total_mb; "
                                           "queue — the writer was behind; store — the store failed).", ["reason"],
                                           registry=registry)
        self._models: dict[str, str] = {}
        # Each series' child by its label values: labels() validates and converts its arguments on
        # every call, a third of a request's cost here. As bounded as the label values themselves.
        self._series: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *values: str) -> Any:
        key = (id(metric), *values)
        child = self._series.get(key)
        if child is None:
            child = self._series[key] = metric.labels(*values)
        return child

    def request_log_drop(self, reason: str, count: int) -> None:
        """The request log dropped `count` requests (proxy/ops/request_log.py)."""
        self._child(self.request_log_dropped, reason).inc(count)

    def budget_alert(self, subject: str, window: str) -> None:
        """A budget's window crossed its alert_at share (proxy/budgets/alerts.py)."""
        self._child(self.budget_alerts, subject, window).inc()

    def attempt(self, record: AttemptRecord) -> None:
        self._child(self.attempts, record.upstream, record.account, record.klass).inc()

    def request_done(self, record: RequestRecord) -> None:
        upstream = record.upstream or NO_UPSTREAM
        model = self.model_label(record.model)
        endpoint = record.endpoint or record.client_protocol
        served = self.model_label(record.served_model) if record.served_model else model
        self._child(self.requests, record.client_protocol, endpoint, upstream, model, served, record.outcome).inc()
        usage = record.usage
        if usage is not None:
            for kind, count in (("input", usage.input_tokens), ("output", usage.output_tokens),
                                ("cached", usage.cache_read_tokens), ("reasoning", usage.reasoning_tokens)):
                if count:
                    self._child(self.tokens, record.client_key, upstream, model, kind).inc(count)
            if record.cost_micros is not None:
                if record.cost_micros:
                    self._child(self.cost, record.client_key, upstream, model).inc(record.cost_micros / 1e6)
                if record.cache_saved_micros:
                    self._child(self.cache_saved, record.client_key, upstream).inc(record.cache_saved_micros / 1e6)
            elif usage.input_tokens or usage.output_tokens:
                self._child(self.cost_unknown, record.client_key, upstream, model).inc()
        if record.first_byte_s is not None:
            self._child(self.ttfb, record.client_protocol, endpoint, upstream).observe(record.first_byte_s)
        if record.duration_s is not None:
            self._child(self.duration, record.client_protocol, endpoint, upstream).observe(record.duration_s)

    def model_label(self, model: str) -> str:
        label = self._models.get(model)
        if label is not None:
            return label
        if len(self._models) >= MAX_MODELS or not model or len(model) > MAX_MODEL_NAME or not self.served(model):
            return OTHER_MODEL  # not remembered: the table holds only names given a series
        self._models[model] = model
        return model


def render(live: LiveGauges, pools: Mapping[str, AccountPool], accept: str | None,
           health: StoreHealth | None = None) -> tuple[bytes, str]:
    """The exposition for a scrape (Prometheus text, or OpenMetrics if the scraper asks for it) and
    its content type."""
    encoder, content_type = choose_encoder(accept or "")
    collectors: list[_Source | _AccountStates | _StoreUp] = [live.source, _AccountStates(pools)]
    if health is not None:
        collectors.append(_StoreUp(health))
    return encoder(_Scrape(*collectors)), content_type
