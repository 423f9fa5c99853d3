"""Deterministic per-chunk and per-idle-stream figures for the streaming path, in one process:

    python bench/deterministic.py [--tree DIR] [--pairs all|chat,chat_completions;...] [--mode direct|wsgi]
                                  [--streams K] [--top N]
    python bench/deterministic.py [--tree DIR] [--pairs …] --callgrind    # (c), about a minute a pair

Wall-clock CPU figures (bench/run.py) move by 10-20 % between runs on a shared machine; these do
not. Everything runs in this process under gevent's patching, as in a gunicorn gevent worker:

  * the proxy is the app `create_app(config)` builds, driven through Flask's test client; its
    upstream calls go through the real transport (`requests`, urllib3, http.client) to an
    upstream served by a greenlet of this process on loopback — mock_upstream.py's pre-serialised
    streams, every delta stamped alike — so the streaming engine reads a real socket;
  * the upstream writes each delta only once the event loop is idle (`gevent.idle()`): the proxy
    has read, translated and written the previous one, so every chunk is its own wake-up, as at
    the operating point (bench/run.py), and no two chunks are ever read together;
  * `--mode direct` (the default) hands the stream a `GunicornWriter` over one end of a socket
    pair once its first frame is out, as proxy/serving/worker.py does under gunicorn: the frames
    then go out from the hub's relay step, the path real streams take; `--mode wsgi` lets the
    test client iterate the body instead.

Figures, per client → upstream pair:
  (a) Python calls per chunk: cProfile around a whole request of 200 deltas and one of 20 (after
      warm-up streams), (calls(200) - calls(20)) / 180 — every function call, C builtins included;
      "proxy" counts only functions defined in the tree's proxy/ package. Deterministic: the same
      code does the same calls (re-run to see it);
  (b) bytes held per idle stream: tracemalloc over K streams opened and primed, each parked in its
      own greenlet waiting on its silent upstream (as a stream between two deltas is), after
      gc.collect(): (after - before) / K. Includes the test client's and the in-process upstream's
      share of each open stream, identical in both trees; `--top` lists the proxy lines that hold
      the most (allocation sites attributed to the innermost frame inside proxy/);
  (c) with --callgrind, instructions per chunk: this script is run again as `--one-stream PAIR
      --chunks N` (start-up, three warm-up streams, one stream of N deltas) under
      `valgrind --tool=callgrind` with PYTHONHASHSEED=0, for N = 20 and N = 220; the difference of
      the two runs' "Collected" totals / 200. Start-up and warm-up are the same in both runs (two
      runs of the same N differ by about a thousand instructions in three and a half billion).

`--tree DIR` imports the proxy package from DIR (another worktree, an older commit) instead of the
one beside this script; only APIs present since 54226af are used.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402 - after patching, as in a gunicorn gevent worker
import cProfile  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import re  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tracemalloc  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402
from gevent.server import StreamServer  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mock_upstream as mock  # noqa: E402 - bench/ is not a package

CLIENT_KEY = "sk-bench"
STAMP = b"t1700000000000000000 "  # every delta alike: the same bytes in every run and tree
PAIRS = [("responses", "responses"), ("chat", "chat_completions"), ("messages", "messages"),
         ("messages", "chat_completions"), ("responses", "chat_completions")]
MODELS = {"chat_completions": "chat-bench", "messages": "claude-bench", "responses": "resp-bench"}
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}
SHORT, LONG = 20, 200


# ---------------------------------------------------------------- the upstream, in this process

class Upstream:
    """mock_upstream.py's streams served by a greenlet per connection, keep-alive, one delta per
    idle turn of the event loop; while `held`, a stream stops after its first event until released."""

    def __init__(self) -> None:
        self.server = StreamServer(("127.0.0.1", 0), self.connection)
        self.server.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.held = False
        self.release = gevent.event.Event()

    def connection(self, sock: socket.socket, _address: Any) -> None:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            end = buf.index(b"\r\n\r\n")
            head, length = buf[:end].lower(), mock.content_length(buf[:end].lower())
            while len(buf) < end + 4 + length:
                buf += sock.recv(65536)
            body, buf = buf[end + 4:end + 4 + length], buf[end + 4 + length:]
            path = head.split(b" ", 2)[1]
            stream_cls = next(cls for suffix, (cls, _whole) in mock.ENDPOINTS.items() if path.endswith(suffix))
            self.stream(sock, stream_cls(False), mock.scenario_from(body, json.loads(body)).chunks)

    def stream(self, sock: socket.socket, enc: Any, chunks: int) -> None:
        sock.sendall(mock.STREAM_HEAD + enc.start())
        if self.held:
            self.release.wait()
        for _ in range(chunks):
            gevent.idle()  # the proxy has done all it will with the previous chunk
            sock.sendall(enc.delta(STAMP))
        gevent.idle()
        sock.sendall(enc.end() + mock.END)


# ---------------------------------------------------------------- the proxy, in this process

class BenchResponse:
    """What GunicornWriter reads of gunicorn's response: the client's socket (one end of a socket
    pair, drained by a greenlet), chunked framing, whether the head is out, the bytes sent."""

    def __init__(self) -> None:
        self.sock, self.peer = socket.socketpair()
        self.chunked, self.headers_sent, self.sent = True, False, 0
        self.received = 0
        self.reader = gevent.spawn(self.drain)

    def drain(self) -> None:
        while data := self.peer.recv(65536):
            self.received += len(data)

    def close(self) -> None:
        self.sock.close()
        self.reader.join()
        self.peer.close()


class Proxy:
    def __init__(self, upstream: Upstream, mode: str) -> None:
        from proxy.config import parse
        from proxy.serving.app import create_app
        from proxy.serving.direct_write import GunicornWriter

        def account(protocol: str) -> dict[str, Any]:
            return {"name": f"mock-{protocol}", "protocol": protocol, "base_url": upstream.url,
                    "models": {"serve": [MODELS[protocol]]},
                    "accounts": [{"id": f"{protocol}-1", "api_key": f"sk-dummy-{protocol}-1"}]}

        config = parse({"client_keys": [CLIENT_KEY], "log_level": "warning", "state_path": None,
                        "upstreams": [account(p) for p in MODELS]})
        self.app = create_app(config, start_background=False)
        self.client = self.app.test_client()
        self.mode = mode
        self.next_response: BenchResponse | None = None
        inner = self.app.wsgi_app

        def wsgi(environ: dict[str, Any], start_response: Any) -> Any:  # proxy/serving/worker.py's wrapping
            body = inner(environ, start_response)
            write_directly = getattr(body, "write_directly", None)
            if write_directly is not None and self.next_response is not None:
                write_directly(GunicornWriter(self.next_response))
            return body

        self.app.wsgi_app = wsgi  # type: ignore[method-assign]

    def open(self, client: str, upstream: str, chunks: int) -> tuple[Any, Any, BenchResponse | None]:
        """Send the request and take the first frame: (response, its iterator, the direct writer's end)."""
        text = f"Say something. [bench:chunks={chunks}]"
        body: dict[str, Any] = {"model": MODELS[upstream], "stream": True}
        if client == "responses":
            body["input"] = text
        else:
            body["messages"] = [{"role": "user", "content": text}]
        if client == "messages":
            body["max_tokens"] = 1000
        self.next_response = BenchResponse() if self.mode == "direct" else None
        resp = self.client.post(PATHS[client], json=body, buffered=False,
                                headers={"Authorization": f"Bearer {CLIENT_KEY}", "x-api-key": CLIENT_KEY})
        assert resp.status_code == 200, resp.get_data()
        frames = iter(resp.response)
        first = next(frames)
        assert first
        direct, self.next_response = self.next_response, None
        if direct is not None:
            direct.headers_sent = True  # gunicorn has written the head and the first frame
        return resp, frames, direct

    def stream(self, client: str, upstream: str, chunks: int) -> int:
        """One whole streamed request; the body bytes the client got after the first frame."""
        resp, frames, direct = self.open(client, upstream, chunks)
        size = sum(len(f) for f in frames)
        resp.close()
        if direct is not None:
            direct.close()
            size += direct.received
        return size


# ---------------------------------------------------------------- the measures

def calls(proxy: Proxy, pair: tuple[str, str], chunks: int, tree: str) -> tuple[Counter[str], int]:
    """Every function call of one whole stream of `chunks` deltas, by function; the bytes it sent."""
    gc.collect()
    profile = cProfile.Profile()
    profile.enable()
    size = proxy.stream(*pair, chunks)
    profile.disable()
    counts: Counter[str] = Counter()
    for (filename, line, name), (_cc, nc, _tt, _ct, _callers) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        where = os.path.relpath(filename, tree) if filename.startswith(tree) else filename
        counts[f"{where}:{line}({name})" if filename != "~" else name] += nc
    return counts, size


def per_chunk(proxy: Proxy, pair: tuple[str, str], tree: str) -> tuple[float, float, Counter[str]]:
    """(calls per chunk, proxy/ calls per chunk, the per-function difference long - short)."""
    short, _ = calls(proxy, pair, SHORT, tree)
    long, _ = calls(proxy, pair, LONG, tree)
    diff = Counter(long)
    diff.subtract(short)
    total = sum(diff.values()) / (LONG - SHORT)
    own = sum(n for k, n in diff.items() if k.startswith("proxy/")) / (LONG - SHORT)
    return total, own, diff


def idle_bytes(proxy: Proxy, upstream: Upstream, pair: tuple[str, str], k: int,
               tree: str) -> tuple[float, Counter[str]]:
    """Bytes held per open idle stream, and by which proxy lines (allocation sites)."""
    upstream.held, upstream.release = True, gevent.event.Event()
    opened: list[tuple[Any, gevent.Greenlet, BenchResponse | None]] = []
    gc.collect()
    before = tracemalloc.take_snapshot()
    for _ in range(k):
        resp, frames, direct = proxy.open(*pair, 2)
        opened.append((resp, gevent.spawn(lambda f=frames: sum(len(x) for x in f)), direct))
    gevent.sleep(0)
    gevent.sleep(0)  # every stream's greenlet is parked on its silent upstream
    gc.collect()
    after = tracemalloc.take_snapshot()
    upstream.held = False
    upstream.release.set()
    for resp, reader, direct in opened:
        reader.join()
        resp.close()
        if direct is not None:
            direct.close()
    filters = [tracemalloc.Filter(False, tracemalloc.__file__)]
    by_site: Counter[str] = Counter()
    for stat in after.filter_traces(filters).compare_to(before.filter_traces(filters), "traceback"):
        innermost_first = list(reversed(stat.traceback))  # a Traceback runs from the oldest frame
        site = next((f for f in innermost_first if f.filename.startswith(os.path.join(tree, "proxy"))), None)
        key = (f"{os.path.relpath(site.filename, tree)}:{site.lineno}" if site is not None
               else f"(outside proxy/) {innermost_first[0].filename.rsplit('/', 1)[-1]}")
        by_site[key] += stat.size_diff
    return sum(by_site.values()) / k, by_site


def instructions(tree: str, mode: str, pair: tuple[str, str]) -> float:
    """Instructions per chunk, from two runs of this script under callgrind (run side by side)."""
    runs = {n: subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__, "--tree", tree,
         "--mode", mode, "--one-stream", ",".join(pair), "--chunks", str(n)],
        env={**os.environ, "PYTHONHASHSEED": "0"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for n in (SHORT, SHORT + 200)}
    collected = {}
    for n, run in runs.items():
        found = re.search(r"Collected : (\d+)", run.communicate()[1])
        assert run.returncode == 0 and found, f"the callgrind run of {n} deltas failed"
        collected[n] = int(found.group(1))
    return (collected[SHORT + 200] - collected[SHORT]) / 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", default=str(HERE.parent), help="the worktree whose proxy/ is measured")
    parser.add_argument("--pairs", default="all", help="client,upstream;client,upstream… (default: all five)")
    parser.add_argument("--mode", choices=("direct", "wsgi"), default="direct")
    parser.add_argument("--streams", type=int, default=200, help="idle streams opened at once (b)")
    parser.add_argument("--top", type=int, default=0, help="list the N largest per-function / per-line differences")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--callgrind", action="store_true", help="(c) only: instructions per chunk, per pair")
    parser.add_argument("--one-stream", help="client,upstream: warm up, run one stream of --chunks, exit (c)")
    parser.add_argument("--chunks", type=int, default=SHORT)
    args = parser.parse_args()
    tree = str(Path(args.tree).resolve())
    sys.path.insert(0, tree)
    import proxy as proxy_package

    assert proxy_package.__file__ and proxy_package.__file__.startswith(tree), proxy_package.__file__
    pairs = PAIRS if args.pairs == "all" else [tuple(p.split(",")) for p in args.pairs.split(";")]
    if args.callgrind:
        print(f"tree {tree}, mode {args.mode}, callgrind: ({SHORT + 200} - {SHORT} deltas) / 200")
        for pair in pairs:
            per = instructions(tree, args.mode, pair)  # type: ignore[arg-type]
            print(f"{pair[0]:>9} → {pair[1]:<16} instructions/chunk {per:9.0f}", flush=True)
        return
    upstream = Upstream()
    proxy = Proxy(upstream, args.mode)
    if args.one_stream:
        pair = tuple(args.one_stream.split(","))
        for _ in range(3):
            proxy.stream(*pair, SHORT)  # type: ignore[arg-type]
        proxy.stream(*pair, args.chunks)  # type: ignore[arg-type]
        return
    for pair in pairs:  # warm-up: lazy imports, caches, the pooled upstream connection
        for _ in range(3):
            proxy.stream(*pair, SHORT)  # type: ignore[arg-type]
    tracemalloc.start(32)
    print(f"tree {tree}, mode {args.mode}, {SHORT} vs {LONG} deltas, {args.streams} idle streams")
    for pair in pairs:
        total, own, diff = per_chunk(proxy, pair, tree)  # type: ignore[arg-type]
        line = f"{pair[0]:>9} → {pair[1]:<16} calls/chunk {total:7.2f} (proxy/ {own:6.2f})"
        by_site: Counter[str] = Counter()
        if not args.skip_memory:
            per_stream, by_site = idle_bytes(proxy, upstream, pair, args.streams, tree)  # type: ignore[arg-type]
            line += f"  bytes/idle stream {per_stream:8.0f}"
        print(line, flush=True)
        for name, n in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:args.top]:
            print(f"      {n / (LONG - SHORT):7.2f}  {name}")
        for site, size in sorted(by_site.items(), key=lambda kv: -abs(kv[1]))[:args.top]:
            print(f"      {size / args.streams:8.1f} B  {site}")


if __name__ == "__main__":
    main()
