"""What usage accounting and the recent-requests list add to each request: the two hooks a finished
request goes through (proxy/ops/usage.py, proxy/ops/recent.py) writing to the SQLite state store,
timed in-process under gevent as a gunicorn worker runs them (the commit on a pool thread).

    python bench/usage_overhead.py

  * one request at a time: each request waits for a commit of its own — the latency it adds to a
    whole answer (the answer is sent once its usage is written) and the CPU it costs;
  * N requests finishing at once: they share commits (group commit) — CPU per request, and how many
    requests one transaction carried;
  * four worker processes doing that on one state file at once: what waiting for SQLite's write
    lock adds (median and 99th percentile latency);
  * the same with `state_path: null` (the in-memory store), for comparison;
  * on vs off end to end: whole non-streamed Chat Completions requests through the app in-process
    (Flask test client → HTTP edge → relay → a canned upstream answer, no network), once with the
    accounting hooks removed and once with them writing to an SQLite state file — CPU and wall
    time per request.

Prints medians of several runs. Not part of CI.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402 - after patching, as in a gunicorn gevent worker
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.blueprints.state import app_state  # noqa: E402
from proxy.config import parse  # noqa: E402
from proxy.ir.response import Usage  # noqa: E402
from proxy.ops.hooks import HookSet  # noqa: E402
from proxy.ops.recent import RecentRequests  # noqa: E402
from proxy.ops.records import RequestRecord  # noqa: E402
from proxy.ops.sqlite_usage_store import SQLiteUsageStore  # noqa: E402
from proxy.ops.usage import UsageAccounting  # noqa: E402
from proxy.ops.usage_store import MemoryUsageStore, UsageStore  # noqa: E402
from proxy.ops.usage_writer import UsageWriter  # noqa: E402
from proxy.relay.transport import UpstreamCall  # noqa: E402
from proxy.serving.app import create_app  # noqa: E402
from tests.state_files import migrated, open_state_file  # noqa: E402


class Counting:
    """The store, counting its transactions."""

    def __init__(self, store: UsageStore) -> None:
        self.store, self.blocking, self.commits = store, store.blocking, 0

    def add(self, usage, recent, purge_before=None):  # type: ignore[no-untyped-def]
        self.commits += 1
        self.store.add(usage, recent, purge_before)


def record(n: int) -> RequestRecord:
    done = RequestRecord(f"req-{n}", ("alice", "bob", "key-1a2b3c4d")[n % 3], "chat_completions",
                         model=("gpt-4o", "claude-sonnet")[n % 2], stream=bool(n % 2))
    done.upstream, done.account, done.upstream_model, done.attempts = "main", f"acct-{n % 4}", "gpt-4o", 1
    done.first_byte_s = 0.05
    done.finish(200, "ok", Usage(input_tokens=1200 + n, output_tokens=300, cache_read_tokens=1000, reasoning_tokens=40))
    return done


def hooks_over(store: UsageStore) -> tuple[HookSet, Counting]:
    counting = Counting(store)
    writer = UsageWriter(counting, retention_days=90)  # type: ignore[arg-type]
    return HookSet([RecentRequests(writer), UsageAccounting(writer)]), counting


def sequential(store: UsageStore, n: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per request, one request at a time."""
    hooks, _ = hooks_over(store)
    records = [record(i) for i in range(n)]
    hooks.request_done(records[0])  # warm: the writer greenlet, the thread pool, the first purge
    wall, cpu = time.perf_counter(), time.process_time()
    for done in records:
        hooks.request_done(done)
    return (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6


def concurrent(store: UsageStore, greenlets: int, each: int) -> tuple[float, float]:
    """(CPU µs per request, requests per commit) with `greenlets` requests finishing at a time."""
    hooks, counting = hooks_over(store)
    hooks.request_done(record(0))
    counting.commits = 0
    batches = [[record(g * each + i) for i in range(each)] for g in range(greenlets)]

    def one(batch: list[RequestRecord]) -> None:
        for done in batch:
            hooks.request_done(done)

    cpu = time.process_time()
    gevent.joinall([gevent.spawn(one, batch) for batch in batches])
    total = greenlets * each
    return (time.process_time() - cpu) / total * 1e6, total / max(counting.commits, 1)


def latencies(path: str, n: int) -> list[float]:
    """Each request's added latency in µs, one request at a time (run in a process of its own)."""
    hooks, _ = hooks_over(SQLiteUsageStore(open_state_file(path)))
    hooks.request_done(record(0))
    out = []
    for i in range(n):
        done = record(i)
        start = time.perf_counter()
        hooks.request_done(done)
        out.append((time.perf_counter() - start) * 1e6)
    return out


def contended(path: str, processes: int, n: int) -> tuple[float, float]:
    """(median, p99) added latency in µs with `processes` workers writing to one file at once.
    Each is this script run again with `--latencies` (multiprocessing's pool deadlocks under gevent's
    patching), as gunicorn's workers are processes of their own."""
    children = [subprocess.Popen([sys.executable, __file__, "--latencies", path, str(n)], stdout=subprocess.PIPE)
                for _ in range(processes)]
    samples = sorted(x for child in children for x in json.loads(child.communicate()[0]))
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


ANSWER = (b'{"id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": "m", "choices": '
          b'[{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}], '
          b'"usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500, '
          b'"prompt_tokens_details": {"cached_tokens": 1000}}}')


class CannedAnswer:
    status = 200
    headers = {"Content-Type": "application/json"}

    def read(self, limit: int = 0) -> bytes:
        return ANSWER

    def stream(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the bench sends whole requests only")


class CannedTransport:
    """The upstream, answered from memory: what remains is the proxy's own work."""

    def send(self, call: UpstreamCall) -> CannedAnswer:
        return CannedAnswer()


def end_to_end(state_path: str, accounting: bool, n: int, concurrency: int = 1) -> tuple[float, float]:
    """(wall µs, CPU µs) per whole request through the app, accounting on or off, `concurrency`
    requests at a time (each a greenlet, as gunicorn's gevent worker runs them)."""
    config = parse({"client_keys": ["sk-bench"], "state_path": migrated(state_path), "log_level": "warning",
                    "upstreams": [{"name": "main", "protocol": "chat_completions", "base_url": "http://bench.invalid/v1",
                                   "accounts": [{"id": "a1", "api_key": "sk-up-bench"}]}]})
    app = create_app(config, start_background=False)
    state = app_state(app)
    state.relay.transport = CannedTransport()
    if not accounting:
        state.hooks.hooks = [h for h in state.hooks.hooks if not isinstance(h, UsageAccounting | RecentRequests)]
    client = app.test_client()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": "Bearer sk-bench"}
    for _ in range(50):  # warm: imports, the writer greenlet, the thread pool, the first purge
        assert client.post("/v1/chat/completions", json=body, headers=headers).status_code == 200

    def some(count: int) -> None:
        for _ in range(count):
            client.post("/v1/chat/completions", json=body, headers=headers)

    wall, cpu = time.perf_counter(), time.process_time()
    gevent.joinall([gevent.spawn(some, n // concurrency) for _ in range(concurrency)])
    done = n // concurrency * concurrency
    return (time.perf_counter() - wall) / done * 1e6, (time.process_time() - cpu) / done * 1e6


def median_of(runs: int, fn) -> tuple[float, ...]:  # type: ignore[no-untyped-def]
    results = [fn() for _ in range(runs)]
    return tuple(statistics.median(r[i] for r in results) for i in range(len(results[0])))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(10**6))

        def sqlite() -> UsageStore:
            return SQLiteUsageStore(open_state_file(Path(tmp) / f"state-{next(counter)}.db"))

        wall, cpu = median_of(5, lambda: sequential(sqlite(), 2000))
        print(f"SQLite, one request at a time:  {wall:7.1f} µs added latency, {cpu:6.1f} µs CPU per request")
        for greenlets in (10, 50, 200):
            cpu, per_commit = median_of(5, lambda g=greenlets: concurrent(sqlite(), g, 4000 // g))
            print(f"SQLite, {greenlets:3d} finishing at once: {cpu:6.1f} µs CPU per request, "
                  f"{per_commit:5.1f} requests per commit")
        p50, p99 = contended(str(Path(tmp) / "shared.db"), 4, 2000)
        print(f"SQLite, 4 processes, one request at a time each: {p50:6.1f} µs median, {p99:7.1f} µs p99 added latency")
        wall, cpu = median_of(5, lambda: sequential(MemoryUsageStore(), 2000))
        print(f"in memory, one at a time:       {wall:7.1f} µs added latency, {cpu:6.1f} µs CPU per request")
        for concurrency in (1, 16):
            print(f"end to end, whole requests through the app, {concurrency} at a time (canned upstream):")
            results = {}
            for accounting in (False, True):
                results[accounting] = median_of(5, lambda a=accounting, c=concurrency: end_to_end(
                    str(Path(tmp) / f"e2e-{next(counter)}.db"), a, 2000, c))
                wall, cpu = results[accounting]
                state = "on " if accounting else "off"
                print(f"  accounting {state}: {wall:7.1f} µs wall, {cpu:6.1f} µs CPU per request")
            (off_wall, off_cpu), (on_wall, on_cpu) = results[False], results[True]
            print(f"  difference:     {on_wall - off_wall:+7.1f} µs wall, {on_cpu - off_cpu:+6.1f} µs CPU per request")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--latencies"]:
        print(json.dumps(latencies(sys.argv[2], int(sys.argv[3]))))
    else:
        main()
