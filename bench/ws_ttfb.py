"""Time to first event of a Responses stream: over the WebSocket (`GET /v1/responses`) vs. over
SSE (`POST /v1/responses`), through the proxy (one gunicorn gevent worker) in front of the demo
upstream.

    python bench/ws_ttfb.py [--requests 300]

Both clients keep one connection open and send the same request sequentially, as Codex does; the
time is from sending the request to the first event (`response.created`) arriving. The upstream is
the demo's Chat endpoint (translated to Responses), answering at once (`[demo:pace=0]`).
Prints median / p90 / p99 for each. Not part of CI.
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

from websockets.sync.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import CLIENT_KEY, base_config, start_demo_upstream, start_proxy, stop_proxy

REQUEST = {"model": "demo-model", "input": "Hello [demo:pace=0] [demo:words=3]", "store": False}


def over_sse(port: int, n: int) -> list[float]:
    body = json.dumps({**REQUEST, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = sock.makefile("rb")
    head = (f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {CLIENT_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        sock.sendall(head + body)
        first = None
        while reader.readline() not in (b"\r\n", b""):  # headers
            pass
        while True:  # the chunked body, to its end
            size = int(reader.readline().split(b";")[0], 16)
            if size == 0:
                reader.readline()
                break
            data = reader.read(size)
            reader.read(2)
            if first is None and b"data: " in data:
                first = time.perf_counter() - started
        times.append(first or 0.0)
    sock.close()
    return times


def over_websocket(port: int, n: int, deflate: bool = False) -> list[float]:
    frame = json.dumps({"type": "response.create", **REQUEST})
    times = []
    with connect(f"ws://127.0.0.1:{port}/v1/responses", additional_headers={"Authorization": f"Bearer {CLIENT_KEY}"},
                 compression="deflate" if deflate else None) as ws:
        for _ in range(n):
            started = time.perf_counter()
            ws.send(frame)
            first = None
            while True:
                event = json.loads(ws.recv())
                if first is None:
                    first = time.perf_counter() - started
                if event["type"] in ("response.completed", "response.failed", "error"):
                    break
            times.append(first)
    return times


def summary(times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    return (f"median {statistics.median(ms):6.2f} ms   p90 {ms[int(len(ms) * 0.9)]:6.2f} ms   "
            f"p99 {ms[int(len(ms) * 0.99)]:6.2f} ms   (n={len(ms)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    upstream = start_demo_upstream()
    with tempfile.TemporaryDirectory() as tmp:
        proxy = start_proxy(base_config(upstream.url), Path(tmp), extra_env={"LLM_PROXY_ACCESS_LOG": "off"})
        try:
            port = int(proxy.url.rsplit(":", 1)[1])
            over_sse(port, 30)  # warm up both paths
            over_websocket(port, 30)
            sse = over_sse(port, args.requests)
            ws = over_websocket(port, args.requests)
            deflated = over_websocket(port, args.requests, deflate=True)
        finally:
            stop_proxy(proxy)
            upstream.process.terminate()
    print(f"SSE       (POST /v1/responses): {summary(sse)}")
    print(f"WebSocket (GET /v1/responses) : {summary(ws)}")
    print(f"  with permessage-deflate     : {summary(deflated)}   (Codex offers it)")


if __name__ == "__main__":
    main()
