"""What the Redis state backend costs per request, against the SQLite one: whole non-streamed Chat
Completions requests through the app in-process under gevent, as a gunicorn worker runs them
(Flask test client → HTTP edge → relay → a canned upstream answer, no upstream network), the pool
keeper running, once with `state: {backend: sqlite}` (a state file) and once with
`state: {backend: redis}` (a redis-server on loopback, started here).

    python bench/state_backend.py

Per request: wall time and the worker's CPU (redis-py's work included), and for Redis the server's
CPU too (read from /proc). Three cases: one request at a time, 16 at a time, and 16 at a time on an
account with `max_concurrency` (a cross-host slot taken and given back per request with Redis).
Prints medians of 5 runs. Not part of CI. Needs redis-server (apt-get install redis-server).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import os  # noqa: E402 - after patching, as in a gunicorn gevent worker
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.usage_overhead import CannedTransport  # noqa: E402
from proxy.blueprints.state import app_state  # noqa: E402
from proxy.config import parse  # noqa: E402
from proxy.serving.app import create_app  # noqa: E402
from tests.redis_server import start_redis  # noqa: E402
from tests.state_files import migrated  # noqa: E402


def server_cpu(pid: int) -> float:
    """CPU seconds a process has used (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(state: dict[str, Any], state_path: str, n: int, concurrency: int,
        max_concurrency: int | None, redis_pid: int | None) -> tuple[float, float, float]:
    """(wall µs, worker CPU µs, Redis CPU µs) per request."""
    account: dict[str, Any] = {"id": "a1", "api_key": "sk-up-bench"}
    if max_concurrency is not None:
        account["max_concurrency"] = max_concurrency
    config = parse({"client_keys": ["sk-bench"], "state_path": migrated(state_path), "log_level": "warning",
                    "state": state,
                    "upstreams": [{"name": "main", "protocol": "chat_completions",
                                   "base_url": "http://bench.invalid/v1", "accounts": [account]}]})
    app = create_app(config)
    app_state(app).relay.transport = CannedTransport()
    client = app.test_client()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": "Bearer sk-bench"}
    for _ in range(50):  # warm: imports, connections, the writer greenlet
        assert client.post("/v1/chat/completions", json=body, headers=headers).status_code == 200

    def some(count: int) -> None:
        for _ in range(count):
            assert client.post("/v1/chat/completions", json=body, headers=headers).status_code == 200

    redis_before = server_cpu(redis_pid) if redis_pid else 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    gevent.joinall([gevent.spawn(some, n // concurrency) for _ in range(concurrency)], raise_error=True)
    done = n // concurrency * concurrency
    wall, cpu = (time.perf_counter() - wall) / done * 1e6, (time.process_time() - cpu) / done * 1e6
    redis_cpu = (server_cpu(redis_pid) - redis_before) / done * 1e6 if redis_pid else 0.0
    app_state(app).keeper.stop()
    return wall, cpu, redis_cpu


def main() -> None:
    redis = start_redis()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for label, concurrency, limit in (("one at a time", 1, None), ("16 at a time", 16, None),
                                              ("16 at a time, max_concurrency 64", 16, 64)):
                print(f"{label}:")
                for backend in ("sqlite", "redis"):
                    state = {"backend": backend} if backend == "sqlite" else {
                        "backend": "redis", "url": redis.url, "prefix": f"bench-{uuid.uuid4().hex[:6]}:"}
                    runs = [run(state, str(Path(tmp) / f"{uuid.uuid4().hex}.db"), 2000, concurrency, limit,
                                redis.process.pid if backend == "redis" else None) for _ in range(5)]
                    wall, cpu, server = (statistics.median(r[i] for r in runs) for i in range(3))
                    extra = f", redis-server {server:6.1f} µs CPU" if backend == "redis" else ""
                    print(f"  {backend:6s}: {wall:7.1f} µs wall, {cpu:6.1f} µs worker CPU per request{extra}")
    finally:
        redis.stop()


if __name__ == "__main__":
    main()
