"""What the operators' concerns add to each request, timed in-process: the hooks a worker runs for
a whole answer (one attempt, the request's end) and for a stream (one attempt, the stream opening
and closing, the request's end), with metrics on and off — prometheus-client in its multiprocess
mode, writing to files as gunicorn's workers do. Also the cost of one scrape. Nothing here runs per
streamed chunk: the hooks are told of a stream's opening and end only.

    python bench/ops_overhead.py

Prints microseconds per request (median of several runs). Not part of CI. The end-to-end figure
with the whole server is `python bench/run.py --quick --ops both`.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# Before prometheus_client is imported, as gunicorn's master arranges for its workers.
METRICS_DIR = tempfile.mkdtemp(prefix="llm-proxy-ops-bench-")
os.environ["PROMETHEUS_MULTIPROC_DIR"] = METRICS_DIR
atexit.register(shutil.rmtree, METRICS_DIR, True)

from proxy.config import parse  # noqa: E402 (after PROMETHEUS_MULTIPROC_DIR is set)
from proxy.ir.response import Usage  # noqa: E402 (after PROMETHEUS_MULTIPROC_DIR is set)
from proxy.ops.hooks import HookSet  # noqa: E402 (after PROMETHEUS_MULTIPROC_DIR is set)
from proxy.ops.log_lines import LogLines  # noqa: E402 (after PROMETHEUS_MULTIPROC_DIR is set)
from proxy.ops.metrics import LiveGauges, Metrics, render  # noqa: E402 (after PROMETHEUS_MULTIPROC_DIR is set)
from proxy.ops.records import AttemptRecord, RequestRecord  # noqa: E402 (after PROMETHEUS_MULTIPROC_DIR is set)
from proxy.pool.pool import AccountPool  # noqa: E402 (after PROMETHEUS_MULTIPROC_DIR is set)
from proxy.routing import Router  # noqa: E402 (after PROMETHEUS_MULTIPROC_DIR is set)

CONFIG = parse({"client_keys": ["c"], "log_level": "warning", "upstreams": [{
    "name": "main", "protocol": "chat_completions", "base_url": "http://u/v1",
    "accounts": [{"id": f"a{i}", "api_key": f"sk-{i:06d}"} for i in range(4)]}]})


def request(hooks: HookSet, stream: bool) -> None:
    """What one request makes the hooks do, with records built as the edge and the relay build them."""
    record = RequestRecord("req_0123456789abcdef", "key-1234abcd", "chat_completions", "demo-model", stream)
    record.upstream, record.account, record.upstream_model, record.attempts = "main", "a1", "demo-model", 1
    hooks.attempt(AttemptRecord(record.request_id, "main", "a1", 200, "ok", "stream" if stream else "return",
                                0.004, record))
    record.first_byte()
    if stream:
        hooks.stream_opened(record)
    record.finish(200, "ok", Usage(input_tokens=120, output_tokens=40, cache_read_tokens=64))
    if stream:
        hooks.stream_closed(record)
    hooks.request_done(record)


def per_call(fn: Callable[[], None], rounds: int = 20000, runs: int = 7) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(rounds):
            fn()
        samples.append((time.perf_counter() - started) / rounds)
    return statistics.median(samples) * 1e6


def main() -> None:
    logging.getLogger("proxy").setLevel(CONFIG.log_level.upper())  # as the bench's server runs
    router = Router(CONFIG.upstreams)
    live = LiveGauges()
    metrics = Metrics(live, lambda model: bool(router.resolve(model)))
    setups = {"no hooks": HookSet(), "metrics off (log lines, live gauges)": HookSet([LogLines(), live]),
              "metrics on": HookSet([LogLines(), live, metrics])}
    # Records themselves cost something whatever the hooks: their share is in "no hooks".
    for name, hooks in setups.items():
        whole = per_call(lambda: request(hooks, False))  # noqa: B023 (called before the loop moves on)
        streamed = per_call(lambda: request(hooks, True))  # noqa: B023
        print(f"{name:40} whole answer {whole:6.2f} µs   stream {streamed:6.2f} µs")
    pools = {u.name: AccountPool(u) for u in CONFIG.upstreams}
    scrape = per_call(lambda: render(live, pools, None) and None, rounds=200)
    print(f"{'one scrape (this process)':40} {scrape:8.0f} µs")


if __name__ == "__main__":
    main()
