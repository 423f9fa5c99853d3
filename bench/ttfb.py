"""Time to first byte: the simulated upstream directly vs. through the proxy (gunicorn + gevent).

    python bench/ttfb.py [--requests 500]

Starts the demo upstream and the proxy (one gevent worker) the way the tests do, then sends the
same streaming Chat request sequentially over a kept-alive raw socket to each, timing from the
last byte of the request to the first byte of the first SSE event. Prints median / p90 / p99.
Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import CLIENT_KEY, base_config, start_demo_upstream, start_proxy, stop_proxy

BODY = json.dumps({"model": "demo-model", "stream": True,
                   "messages": [{"role": "user", "content": "Hello [demo:pace=0] [demo:words=3]"}]}).encode()


def measure(host: str, port: int, path: str, key: str, n: int) -> list[float]:
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = sock.makefile("rb")
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n").encode()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        sock.sendall(head + BODY)
        first = None
        while True:  # headers
            line = reader.readline()
            if line in (b"\r\n", b""):
                break
        while True:  # chunked body
            size = int(reader.readline().split(b";")[0], 16)
            if size == 0:
                reader.readline()
                break
            data = reader.read(size)
            reader.read(2)
            if first is None and data.startswith(b"data: "):
                first = time.perf_counter() - started
        times.append(first or 0.0)
    sock.close()
    return times


def summary(times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    return (f"median {statistics.median(ms):6.2f} ms   p90 {ms[int(len(ms) * 0.9)]:6.2f} ms   "
            f"p99 {ms[int(len(ms) * 0.99)]:6.2f} ms   (n={len(ms)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    upstream = start_demo_upstream()
    with tempfile.TemporaryDirectory() as tmp:
        proxy = start_proxy(base_config(upstream.url), Path(tmp), extra_env={"LLM_PROXY_ACCESS_LOG": "/dev/null"})
        try:
            up_port = int(upstream.root.rsplit(":", 1)[1])
            px_port = int(proxy.url.rsplit(":", 1)[1])
            measure("127.0.0.1", px_port, "/v1/chat/completions", CLIENT_KEY, 50)  # warm up both
            measure("127.0.0.1", up_port, "/v1/chat/completions", "sk-up-1", 50)
            direct = measure("127.0.0.1", up_port, "/v1/chat/completions", "sk-up-1", args.requests)
            proxied = measure("127.0.0.1", px_port, "/v1/chat/completions", CLIENT_KEY, args.requests)
        finally:
            stop_proxy(proxy)
            upstream.process.terminate()
    print(f"upstream directly : {summary(direct)}")
    print(f"through the proxy : {summary(proxied)}")
    print(f"added by the proxy: median {(statistics.median(proxied) - statistics.median(direct)) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
