"""What a client key's limits add to each request: `Limiter.admit` (estimate, check and reserve)
plus its `request_done` (the charge), in-process under gevent as a gunicorn worker runs them, for
each store — memory (`state_path: null`), the SQLite state file (on a pool thread), and Redis (a
local redis-server, the Lua scripts) — one request at a time and 16 at once.

    python bench/limits_overhead.py [--requests 2000]

Prints wall time per request (medians of 3 runs). Keys without limits cost nothing (admit returns
at once). Not part of CI.
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

import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.config.keys import ClientKey  # noqa: E402
from proxy.config.limits import KeyLimits  # noqa: E402
from proxy.config.state import StateConfig  # noqa: E402
from proxy.ir.request import Message, Request, TextPart  # noqa: E402
from proxy.ir.response import Usage  # noqa: E402
from proxy.limits.limiter import Limiter  # noqa: E402
from proxy.limits.store import LimitStore, MemoryLimitStore, SQLiteLimitStore  # noqa: E402
from proxy.ops.records import RequestRecord  # noqa: E402
from tests.state_files import open_state_file  # noqa: E402

LIMITS = KeyLimits(requests_per_minute=10**9, tokens_per_minute=10**12, tokens_per_day=10**13,
                   tokens_per_month=10**14, max_concurrent=10**6)
REQUEST = Request(model="m", messages=[Message(role="user", parts=[TextPart("hello " * 200)])])


def one(limiter: Limiter, key: ClientKey) -> None:
    record = RequestRecord(uuid.uuid4().hex, key.name, "chat_completions", "m", False)
    limiter.admit(key, record, lambda: REQUEST, {})
    record.finish(200, "ok", Usage(input_tokens=300, output_tokens=50))
    limiter.request_done(record)


def timed(store: LimitStore, n: int, concurrency: int) -> float:
    limiter = Limiter.over(store)  # the store, then memory should it fail
    key = ClientKey(name=f"bench-{uuid.uuid4().hex[:6]}", key="sk-bench", limits=LIMITS)
    started = time.perf_counter()
    if concurrency == 1:
        for _ in range(n):
            one(limiter, key)
    else:
        gevent.joinall([gevent.spawn(lambda: [one(limiter, key) for _ in range(n // concurrency)])
                        for _ in range(concurrency)])
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    stores: dict[str, LimitStore] = {"memory": MemoryLimitStore()}
    with tempfile.TemporaryDirectory() as tmp:
        stores["sqlite"] = SQLiteLimitStore(open_state_file(Path(tmp) / "state.db"))
        redis_server = None
        try:
            from proxy.limits.redis_store import RedisLimitStore
            from tests.redis_server import start_redis

            redis_server = start_redis()
            stores["redis"] = RedisLimitStore(StateConfig(backend="redis", url=redis_server.url))
        except Exception as exc:  # no redis-server here: the other two still say something
            print(f"(redis skipped: {exc})")
        try:
            print(f"{'store':<8} {'1 at a time':>14} {'16 at once':>14}   (µs per request: admit + charge)")
            for name, store in stores.items():
                single = statistics.median(timed(store, args.requests, 1) for _ in range(3))
                many = statistics.median(timed(store, args.requests, 16) for _ in range(3))
                print(f"{name:<8} {single:>14.0f} {many:>14.0f}")
        finally:
            if redis_server is not None:
                redis_server.stop()


if __name__ == "__main__":
    main()
