"""What USD budgets add to each request: `Budgets.admit` (the worst case sized, every budget held in
one atomic step) plus its `request_done` (the settlement), in-process under gevent as a gunicorn
worker runs them, for a key under its own budget and a group's (two subjects, three windows), with
the SQLite state file (on a pool thread, as in a worker) and with Redis (a local redis-server).

    python bench/budgets_overhead.py [--requests 2000]

Prints, per request, what budgets add: CPU time of this process (every thread: the pool thread's
SQLite work included) and wall time, less those of the same loop without budgets (making and
finishing the request's record), one request at a time and 16 at once; for Redis, the script calls
Redis received per request (INFO commandstats: EVALSHA, EVAL, SCRIPT — each one round trip).
Medians of 3 runs. Not part of CI.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402 - after patching, as in a gunicorn gevent worker
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.budgets.guard import Budgets  # noqa: E402
from proxy.budgets.store import BudgetStore, SQLiteBudgetStore  # noqa: E402
from proxy.config import parse  # noqa: E402
from proxy.config.state import StateConfig  # noqa: E402
from proxy.ir.request import Message, Request, TextPart  # noqa: E402
from proxy.ir.response import Usage  # noqa: E402
from proxy.ops.records import RequestRecord  # noqa: E402
from proxy.routing import Router  # noqa: E402
from tests.state_files import open_state_file  # noqa: E402

REQUEST = Request(model="demo-model", max_tokens=500, messages=[Message(role="user", parts=[TextPart("hello " * 200)])])
CONFIG = parse({
    "client_keys": [{"name": "bench", "key": "sk-bench-000000", "budget": {"usd_per_day": 10**6, "usd_total": 10**7}}],
    "key_groups": [{"name": "team", "keys": ["bench"], "budget": {"usd_per_month": 10**6}}],
    "upstreams": [{"name": "u", "protocol": "chat_completions", "base_url": "http://127.0.0.1:9/v1",
                   "accounts": [{"id": "a", "api_key": "sk-a"}]}],
    "pricing": {"models": {"*": {"input": 3, "output": 15}}}})
ENTRY = CONFIG.client_keys[0]
ROUTES = Router(CONFIG.upstreams).resolve("demo-model")


def one(budgets: Budgets | None) -> None:
    """One request's part that budgets see; without `budgets`, the same request's record alone (the baseline)."""
    record = RequestRecord(uuid.uuid4().hex, "bench", "chat_completions", "demo-model", False)
    if budgets is not None:
        budgets.admit(CONFIG, ENTRY, record, ROUTES, lambda: REQUEST, lambda: 300, {})
    record.upstream, record.upstream_model = "u", "demo-model"
    record.finish(200, "ok", Usage(input_tokens=300, output_tokens=50))
    if budgets is not None:
        budgets.request_done(record)


def timed(store: BudgetStore | None, n: int, concurrency: int) -> tuple[float, float]:
    """(CPU, wall) seconds per request, less the baseline's (the record alone) when `store` is given."""
    if store is not None:
        base = timed(None, n, concurrency)
        cpu, wall = timed_with(Budgets(store), n, concurrency)
        return cpu - base[0], wall - base[1]
    return timed_with(None, n, concurrency)


def timed_with(budgets: Budgets | None, n: int, concurrency: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    if concurrency == 1:
        for _ in range(n):
            one(budgets)
    else:
        gevent.joinall([gevent.spawn(lambda: [one(budgets) for _ in range(n // concurrency)])
                        for _ in range(concurrency)])
    return (time.process_time() - cpu) / n, (time.perf_counter() - wall) / n


def commands(client: Any) -> int:
    """Commands the client sent (scripts called: EVALSHA / EVAL / SCRIPT) — not those a script runs inside."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_script"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    n = parser.parse_args().requests
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteBudgetStore(open_state_file(Path(tmp) / "state.db"))
        one(Budgets(store))  # warm: the price table, the connection
        for concurrency in (1, 16):
            runs = [timed(store, n, concurrency) for _ in range(3)]
            print(f"sqlite  concurrency {concurrency:2}: CPU {statistics.median(r[0] for r in runs) * 1e3:.3f} ms, "
                  f"wall {statistics.median(r[1] for r in runs) * 1e3:.3f} ms per request (admit + settle)")
    from proxy.budgets.redis_store import RedisBudgetStore
    from tests.redis_server import start_redis

    server = start_redis()
    try:
        redis_store = RedisBudgetStore(StateConfig(backend="redis", url=server.url, prefix="bench:"))
        one(Budgets(redis_store))  # loads the scripts
        for concurrency in (1, 16):
            before = commands(redis_store.client)
            runs = [timed(redis_store, n, concurrency) for _ in range(3)]
            per = (commands(redis_store.client) - before) / (3 * n)
            print(f"redis   concurrency {concurrency:2}: CPU {statistics.median(r[0] for r in runs) * 1e3:.3f} ms, "
                  f"wall {statistics.median(r[1] for r in runs) * 1e3:.3f} ms per request; "
                  f"{per:.2f} Redis commands (round trips) per request")
        redis_store.client.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
