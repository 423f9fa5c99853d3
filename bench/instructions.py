"""Instructions per request, counted by valgrind (callgrind) in the gevent worker: a figure that
does not move with the host, for judging a cut on this VM, whose CPU-time figures move by ±20 %
from one minute to the next (bench/ab.py):

    python bench/instructions.py [--root CHECKOUT] [--pair chat,chat_completions] [--no-stream]
                                 [--requests 100,400] [--chunks 50 --interval-ms 1]

Starts the mock upstream as bench/run.py does and the proxy of `--root` (default: this checkout)
under `valgrind --tool=callgrind`, one worker, `PYTHONHASHSEED=0`; warms it up with a few requests;
sends the first count of requests one at a time and stops the proxy, then does the same with the
second count; the worker's instructions (callgrind's `Ir`) for the second run less the first,
divided by the difference of the counts, are the instructions one more request costs — its start,
its imports and its warm-up cancel out. The worker's timers run meanwhile, and under valgrind a
request takes ~50 times as long: a third run, the first count then `--idle-s` idle, gives their
rate, and what they spent in the longer run's extra time is taken out. Needs valgrind (Debian's
`valgrind`); two to three minutes per run, three runs. Owns nothing but that orchestration.
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench  # bench/ is not a package: run.py is found through the path above
import yaml


def worker_instructions(root: Path, mock_url: str, sc: bench.Scenario, model: str,
                        idle_s: float = 0.0) -> tuple[int, float]:
    """Start the proxy under callgrind, run `sc` (after a warm-up), stay idle `idle_s`, stop it;
    the worker's Ir and how long `sc` took."""
    with tempfile.TemporaryDirectory(prefix="llm-proxy-instructions-") as name:
        tmp = Path(name)
        config = tmp / "config.yaml"
        config.write_text(yaml.safe_dump(bench.proxy_config(mock_url, tmp)))
        sock = bench.listening_socket()
        env = {**os.environ, "LLM_PROXY_CONFIG": str(config), "LLM_PROXY_WORKERS": "1",
               "LLM_PROXY_ACCESS_LOG": "/dev/null", "LLM_PROXY_GUNICORN_LOG_LEVEL": "warning",
               "PYTHONHASHSEED": "0"}
        with open(tmp / "proxy.log", "wb") as log:
            proc = subprocess.Popen(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/callgrind.%p",
                 sys.executable, "-m", "gunicorn", "-c", str(root / "gunicorn.conf.py"), "--bind",
                 f"fd://{sock.fileno()}", "--timeout", "900", "proxy.wsgi:app"],
                pass_fds=[sock.fileno()], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        sock.close()
        try:
            # The first request waits in the accept queue until the worker is up: no polling needed.
            req = urllib.request.Request(f"{url}/v1/models", headers={"Authorization": f"Bearer {bench.CLIENT_KEY}"})
            with urllib.request.urlopen(req, timeout=900) as resp:
                resp.read()
            warm = bench.Scenario("warmup", sc.client, sc.upstream, 1, stream=sc.stream, chunks=sc.chunks,
                                  interval_ms=sc.interval_ms, requests_per_conn=20)
            for scenario in (warm, sc):
                started = time.monotonic()
                result = bench.run_load(None, url, bench.CLIENT_KEY, scenario, model, tmp)
                took = time.monotonic() - started
                summary = result.get("summary", {})
                if result.get("failed") or summary.get("errors"):
                    sys.exit(f"the load failed: {result.get('failed') or summary}")
            time.sleep(idle_s)  # a measured stretch of idling, not a wait for anything
            workers = [pid for pid in bench.process_tree(proc.pid) if pid != proc.pid]
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=300)
        counts = []
        for pid in workers:
            for path in glob.glob(f"{tmp}/callgrind.{pid}*"):
                with open(path) as f:
                    counts += [int(line.split()[1]) for line in f if line.startswith("totals:")]
        if not counts:
            sys.exit(f"no callgrind output for the worker; the proxy's log:\n{(tmp / 'proxy.log').read_text()[-2000:]}")
        return max(counts), took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=bench.ROOT, help="the checkout to measure")
    parser.add_argument("--pair", default="chat,chat_completions", help="client,upstream")
    parser.add_argument("--no-stream", dest="stream", action="store_false")
    parser.add_argument("--requests", default="100,400", help="the two request counts")
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--interval-ms", type=float, default=1.0)
    parser.add_argument("--idle-s", type=float, default=30.0, help="the idle stretch that gives the timers' rate")
    args = parser.parse_args()
    client, upstream = args.pair.split(",")
    low, high = (int(n) for n in args.requests.split(","))
    mock, port = bench.start_mock(0)
    try:
        def measure(n: int, idle_s: float = 0.0) -> tuple[int, float]:
            started = time.monotonic()
            sc = bench.Scenario("instructions", client, upstream, 1, stream=args.stream,
                                chunks=args.chunks if args.stream else 0, interval_ms=args.interval_ms,
                                requests_per_conn=n)
            ir, took = worker_instructions(args.root.resolve(), f"http://127.0.0.1:{port}/v1", sc,
                                           bench.MODELS[upstream], idle_s)
            print(f"{n} requests in {took:.0f} s, then {idle_s:g} s idle: {ir:,} instructions in the worker "
                  f"({time.monotonic() - started:.0f} s in all)", flush=True)
            return ir, took

        (ir_low, took_low), (ir_high, took_high) = measure(low), measure(high)
        # The worker's timers (the pool keeper's sync once a second, …) run under valgrind too, and the
        # longer run sees more of them: their rate, from an idle stretch, is taken out.
        ir_idle, _ = measure(low, args.idle_s)
        idle_rate = max(0.0, (ir_idle - ir_low) / args.idle_s)
        per_request = (ir_high - ir_low - idle_rate * (took_high - took_low)) / (high - low)
        what = f"{args.chunks}-delta streams" if args.stream else "non-streamed requests"
        print(f"idle: {idle_rate:,.0f} instructions per second")
        print(f"{args.pair}, {what}: {per_request:,.0f} instructions per request")
    finally:
        bench.stop(mock, signal.SIGTERM)


if __name__ == "__main__":
    main()
