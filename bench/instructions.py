"""Instructions per request in the app, counted by valgrind (callgrind): a figure that does not
move with the host, for judging a cut on this VM, whose CPU-time figures move by ±20 % from one
minute to the next (bench/ab.py):

    python bench/instructions.py [--root CHECKOUT] [--pair chat,chat_completions] [--stream]
                                 [--requests 200,600]

Runs this script's `--child` mode twice under `valgrind --tool=callgrind` (`PYTHONHASHSEED=0`):
the app of `--root` (default: this checkout) built in-process with gevent's patching, as a worker
builds it, and the usage accounting and metrics of bench/run.py's config on, sends 50 warm-up
requests and then the first (or the second) count of requests, one at a time, through Flask's test
client to the mock upstream (bench/mock_upstream.py, a process of its own, not counted). The
difference of the two runs' instructions over the difference of the counts is what one more
request costs; start, imports and warm-up cancel out. Two runs of the same code differ by up to
~80,000 of ~3.7 million instructions per request (2 %) when the machine is busy — how often the
event loop polls while a request waits depends on timing — so take the median of a few runs.

What it leaves out, on purpose: gunicorn (its parser and writes — bench/floor.py measures the
server's floor in CPU time) and the worker's background greenlets (the pool keeper's sync and the
other timers): they run by wall-clock time, which valgrind stretches ~50-fold, so in a live worker
they would count several times over against each request. Needs valgrind (Debian's `valgrind`);
about two minutes a run. Owns nothing but that orchestration.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARM_UP = 50


def child(root: Path, client: str, upstream: str, stream: bool, count: int) -> None:
    """In valgrind: the app of `root`, `count` requests after the warm-up."""
    sys.path[:0] = [str(root), str(root / "bench")]
    from gevent import monkey

    monkey.patch_all()
    import run as bench  # bench/ is not a package: run.py is found through the path above

    mock, port = bench.start_mock(0)
    try:
        with tempfile.TemporaryDirectory(prefix="llm-proxy-instructions-") as tmp:
            from proxy.config import parse
            from proxy.serving import config_snapshots, instance
            from proxy.serving.app import create_app
            from proxy.state import schema

            doc = bench.proxy_config(f"http://127.0.0.1:{port}/v1", Path(tmp))
            schema.migrate(doc["state_path"])
            # An app no master of ours runs: no instance directory, no accepted configs to read.
            instance.current = lambda: None
            config_snapshots.latest = lambda: None
            app = create_app(parse(doc, environ={}), start_background=False)
            test_client = app.test_client()
            path, body = request_for(client, bench.MODELS[upstream], stream)
            headers = {"Authorization": f"Bearer {bench.CLIENT_KEY}", "anthropic-version": "2023-06-01"}
            for _ in range(WARM_UP + count):
                answer = test_client.post(path, json=body, headers=headers)
                if answer.status_code != 200:
                    sys.exit(f"{path} answered {answer.status_code}: {answer.get_data()[:500]!r}")
    finally:
        bench.stop(mock, signal.SIGTERM)


def request_for(client: str, model: str, stream: bool) -> tuple[str, dict[str, object]]:
    messages = [{"role": "user", "content": "Say hello."}]
    if client == "chat":
        return "/v1/chat/completions", {"model": model, "messages": messages, "stream": stream}
    if client == "messages":
        return "/v1/messages", {"model": model, "max_tokens": 64, "messages": messages, "stream": stream}
    if client == "responses":
        return "/v1/responses", {"model": model, "input": "Say hello.", "stream": stream}
    if client == "gemini":  # names its conversation by its first content: every request reads affinity
        call = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/v1beta/models/{model}:{call}", {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]}
    sys.exit(f"--pair: the client is chat, messages, responses or gemini, not {client!r}")


def instructions(root: Path, pair: str, stream: bool, count: int) -> int:
    with tempfile.TemporaryDirectory(prefix="llm-proxy-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                   str(Path(__file__).resolve()), "--child", "--root", str(root), "--pair", pair,
                   "--requests", str(count), *(["--stream"] if stream else [])]
        done = subprocess.run(command, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"the measured run failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        totals = [int(line.split()[1]) for line in out.read_text().splitlines() if line.startswith("totals:")]
        return totals[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to measure")
    parser.add_argument("--pair", default="chat,chat_completions", help="client,upstream")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--requests", default="200,600", help="the two request counts (one with --child)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    client, upstream = args.pair.split(",")
    if args.child:
        child(args.root.resolve(), client, upstream, args.stream, int(args.requests))
        return
    low, high = (int(n) for n in args.requests.split(","))
    counted = [instructions(args.root.resolve(), args.pair, args.stream, n) for n in (low, high)]
    for n, ir in zip((low, high), counted, strict=True):
        print(f"{n} requests after {WARM_UP} to warm up: {ir:,} instructions")
    what = "streamed" if args.stream else "non-streamed"
    print(f"{args.pair}, {what}: {(counted[1] - counted[0]) / (high - low):,.0f} instructions per request "
          f"in the app (gunicorn and the background greenlets left out)")


if __name__ == "__main__":
    main()
