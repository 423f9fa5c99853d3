"""Profile the proxy at one benchmark load, with any profiler that attaches to a process id:

    python bench/profile_op.py --pair chat,chat_completions [--concurrency 10 --chunks 50
        --interval-ms 20 --requests-per-conn 20 | --no-stream --duration 10] \
        -- py-spy record -r 1000 --nonblocking -o out.txt -f raw --pid {pid}

Starts the mock upstream and the proxy (one gevent worker) exactly as bench/run.py does — proxy
on core 0, mock and load generator on core 1 — warms it up, starts the profiler command with
{pid} replaced by the gevent worker's process id, runs the load, then stops the profiler with
SIGINT (py-spy, perf record and strace -c all write their report on SIGINT) and prints the
proxy's CPU per request and per delta over the run, less its idle rate (bench/run.py).
Owns nothing but that orchestration.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench  # bench/ is not a package: run.py is found through the path above


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="chat,chat_completions", help="client,upstream")
    parser.add_argument("--concurrency", type=int, default=bench.OP_STREAMS)
    parser.add_argument("--chunks", type=int, default=bench.OP_LONG)
    parser.add_argument("--interval-ms", type=float, default=bench.OP_INTERVAL_MS)
    parser.add_argument("--requests-per-conn", type=int, default=bench.OP_LONG_PER_CONN)
    parser.add_argument("--no-stream", dest="stream", action="store_false")
    parser.add_argument("--duration", type=float, help="seconds, instead of --requests-per-conn")
    parser.add_argument("--settle-s", type=float, default=1.0, help="after starting the profiler")
    parser.add_argument("--ops", choices=("on", "off"), default="on",
                        help="the operators' concerns on the request path (metrics, usage), as bench/run.py --ops")
    parser.add_argument("profiler", nargs=argparse.REMAINDER, help="-- command with {pid}")
    args = parser.parse_args()
    command = [a for a in args.profiler if a != "--"]
    client, upstream = args.pair.split(",")
    sc = bench.Scenario("profile", client, upstream, args.concurrency, stream=args.stream,
                        chunks=args.chunks if args.stream else 0, interval_ms=args.interval_ms,
                        requests_per_conn=args.requests_per_conn, duration=args.duration,
                        ramp_s=args.chunks * args.interval_ms / 1000 if args.stream else 0.0)
    with bench.warmed_proxy(ops=args.ops == "on") as (target, proxy, _, tmp):
        worker = next(p for p in target.pids() if p != proxy.process.pid)
        profiler = None
        if command:
            profiler = subprocess.Popen([a.replace("{pid}", str(worker)) for a in command])
            time.sleep(args.settle_s)
        res = bench.run_load(target, target.url, target.key, sc, bench.MODELS[upstream], tmp)
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(timeout=120)
        s = res.get("summary", {})
        cpu = res.get("cpu_s") or 0.0
        print(f"requests {s.get('requests')} errors {s.get('errors')} deltas {s.get('deltas')} "
              f"cpu {cpu:.3f}s → {cpu * 1e6 / max(1, s.get('requests') or 1):.0f} µs/request, "
              f"{cpu * 1e6 / max(1, s.get('deltas') or 1):.1f} µs/delta (profiler included; idle "
              f"{target.idle_cpu_rate * 1000:.1f} ms/s subtracted); "
              f"ttfb p50 {s.get('ttft_ms', {}).get('p50')} ms, delay p99 {s.get('delay_ms', {}).get('p99')} ms")

if __name__ == "__main__":
    main()
