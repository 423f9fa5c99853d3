"""Where a non-streamed request's CPU goes, by floors: the same worker's CPU per request on
`/healthz` (gunicorn, gevent, Flask and the proxy's before/after hooks, no key, no upstream),
`/v1/models` (plus the client key's check and a JSON answer) and `/v1/chat/completions` (plus
parsing, routing, the lease, the upstream call, usage and metrics), and the mock alone:

    python bench/floor.py [--ops on|off] [--concurrency 16] [--seconds 4] [--runs 3]

Needs wrk (Debian's `wrk`), which drives the load from the load generator's core. The proxy and the
mock start as bench/run.py starts them; each endpoint runs `--runs` times, interleaved, and the
medians with their spread are printed. Owns nothing but that orchestration.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench  # bench/ is not a package: run.py is found through the path above


def wrk(url: str, concurrency: int, seconds: float, script: Path | None) -> tuple[int, int]:
    """Requests done and non-2xx answers, from one wrk run pinned to the load generator's core."""
    command = ["wrk", "-t1", f"-c{concurrency}", f"-d{seconds:g}s", "-H", f"Authorization: Bearer {bench.CLIENT_KEY}"]
    if script is not None:
        command += ["-s", str(script)]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True,
                         preexec_fn=bench.pinned(bench.LOAD_CORES)).stdout
    done = int(next(line for line in out.splitlines() if "requests in" in line).split()[0])
    bad = next((int(line.split()[-1]) for line in out.splitlines() if "Non-2xx" in line), 0)
    return done, bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", choices=("on", "off"), default="on")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/floor.py needs wrk: apt-get install wrk")
    with bench.warmed_proxy(ops=args.ops == "on") as (target, proxy, port, tmp):
        body = json.dumps({"model": "chat-bench", "messages": [{"role": "user", "content": "hi"}]})
        post = tmp / "post.lua"
        post.write_text(f'wrk.method = "POST"\nwrk.body = [[{body}]]\n'
                        'wrk.headers["Content-Type"] = "application/json"\n')
        floors = [("/healthz", proxy.url + "/healthz", None), ("/v1/models", proxy.url + "/v1/models", None),
                  ("/v1/chat/completions", proxy.url + "/v1/chat/completions", post),
                  ("the mock alone", f"http://127.0.0.1:{port}/v1/chat/completions", post)]
        cpu: dict[str, list[float]] = {name: [] for name, _, _ in floors}
        rate: dict[str, list[float]] = {name: [] for name, _, _ in floors}
        for _ in range(args.runs):
            for name, url, script in floors:
                pids = target.pids()
                before, started = bench.cpu_seconds(pids), time.monotonic()
                done, bad = wrk(url, args.concurrency, args.seconds, script)
                wall = time.monotonic() - started
                if bad:
                    sys.exit(f"{name}: {bad} answers were not 2xx")
                rate[name].append(done / args.seconds)
                if not url.startswith(proxy.url):
                    continue
                used = bench.cpu_seconds(pids) - before - target.idle_cpu_rate * wall
                cpu[name].append(used * 1e6 / max(1, done))
        print(f"ops {args.ops}, {args.concurrency} connections, {args.runs} runs of {args.seconds:g} s "
              "(median, min-max):")
        for name, _, _ in floors:
            print(f"  {name:22s} {bench.spread(rate[name], 0):>24s} req/s   "
                  f"proxy CPU {bench.spread(cpu[name], 0)} µs/request")


if __name__ == "__main__":
    main()
