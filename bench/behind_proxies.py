"""What nginx and Caddy in front add to a stream: first event and each delta, vs. the proxy directly.

    python bench/behind_proxies.py [--requests 30] [--words 20] [--pace 20]

Starts the demo upstream, the proxy (one gevent worker) and, in front of it, Debian's nginx and
Caddy with the guide's example configs (docs/deploy/, via tests/front_servers.py), the way the tests
do. Sends the same paced streaming Chat request sequentially to each path over a fresh connection,
timing from sending the request to the first SSE event and to each content delta. The upstream
paces the deltas identically on every path, so a delta's arrival time minus the direct path's is
what the front adds to it. Prints medians and p90 per path and the difference to direct.
Not part of CI.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import front_servers
from tests.conftest import CLIENT_KEY, base_config, start_demo_upstream, start_proxy, stop_proxy


def one(url: str, body: bytes) -> tuple[float, list[float]]:
    """(first event, [each content delta]) in ms from the request's send."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.connect()
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=body, headers={
        "Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    first: float | None = None
    deltas = []
    while line := resp.readline():
        if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
            continue
        now = (time.perf_counter() - start) * 1000
        first = now if first is None else first
        chunk = json.loads(line[6:])
        if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
            deltas.append(now)
    conn.close()
    assert first is not None
    return first, deltas


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--words", type=int, default=20)
    parser.add_argument("--pace", type=int, default=20, help="ms between the upstream's deltas")
    args = parser.parse_args()
    body = json.dumps({"model": "demo-model", "stream": True, "messages": [
        {"role": "user", "content": f"Hi [demo:words={args.words}] [demo:pace={args.pace}]"}]}).encode()
    upstream = start_demo_upstream()
    proxy = start_proxy(base_config(upstream.url, state_path=None), Path(tempfile.mkdtemp()))
    address = proxy.url.removeprefix("http://")
    fronts = [front_servers.start_nginx(address), front_servers.start_caddy(address)]
    paths = {"direct": proxy.url, **{f.name: f.url for f in fronts}}
    try:
        for url in paths.values():  # warm up: connections, the worker, the upstream
            for _ in range(3):
                one(url, body)
        results: dict[str, list[tuple[float, list[float]]]] = {name: [] for name in paths}
        for _ in range(args.requests):  # interleaved, so a slow moment of the machine hits every path
            for name, url in paths.items():
                results[name].append(one(url, body))
        firsts = {name: [f for f, _ in runs] for name, runs in results.items()}
        # each delta's arrival, per position, median over requests
        per_delta = {name: [statistics.median(d[i] for _, d in runs if len(d) > i) for i in range(args.words)]
                     for name, runs in results.items()}
        print(f"{args.requests} streams per path, {args.words} deltas paced {args.pace} ms by the upstream, "
              "one gevent worker, nginx and Caddy on loopback with docs/deploy/'s configs")
        print(f"{'path':8} {'first event median':>19} {'p90':>8} {'added':>8}   delta arrival added vs direct")
        for name in paths:
            added_first = statistics.median(firsts[name]) - statistics.median(firsts["direct"])
            added_deltas = [a - b for a, b in zip(per_delta[name], per_delta["direct"], strict=True)]
            print(f"{name:8} {statistics.median(firsts[name]):17.2f}ms {p90(firsts[name]):6.2f}ms "
                  f"{added_first:+6.2f}ms   median {statistics.median(added_deltas):+6.2f}ms, "
                  f"max {max(added_deltas):+6.2f}ms")
    finally:
        for front in fronts:
            front.stop()
        stop_proxy(proxy)
        upstream.process.terminate()


if __name__ == "__main__":
    main()
