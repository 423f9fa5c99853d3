"""A/B of two checkouts of the proxy, measured in alternation so that the host's drift cancels:

    python bench/ab.py --a /path/to/checkout-A [--b /path/to/checkout-B] [--pair chat,chat_completions]
                       [--no-stream --concurrency 16 | --concurrency 10 --chunks 50 --interval-ms 20]
                       [--rounds 8 --seconds 4]

Starts one mock upstream and both proxies (one gevent worker each, both pinned to the proxy's core
as bench/run.py pins one; only one is under load at a time), warms both up, then runs the same load
`--rounds` times against each, A then B then B then A and so on (ABBA: neither always goes first),
and prints each round's CPU per request of both, the median of the paired ratios B/A with its
spread, and both sides' median latency p50 (time to first token when streamed). On this 2-core VM
the absolute CPU per request moves by ±20 % from one minute to the next, and the ratio of adjacent
runs still by ±15 % (an A/A run: 0.87 to 1.19 over 6 rounds): a cut smaller than ~5 % needs more
rounds than 8 to show. `--b` defaults to this checkout. Owns nothing but that orchestration; the
load is bench/loadgen.py's, the processes bench/run.py's.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench  # bench/ is not a package: run.py is found through the path above


def per_request_us(result: dict, requests_key: str = "requests") -> float | None:
    summary = result.get("summary", {})
    done = summary.get(requests_key) or 0
    if not done or "cpu_s" not in result or summary.get("errors"):
        return None
    return result["cpu_s"] * 1e6 / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", type=Path, required=True, help="checkout A (the baseline)")
    parser.add_argument("--b", type=Path, default=bench.ROOT, help="checkout B (default: this one)")
    parser.add_argument("--pair", default="chat,chat_completions", help="client,upstream")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--no-stream", dest="stream", action="store_false")
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--interval-ms", type=float, default=20)
    parser.add_argument("--requests-per-conn", type=int, default=10, help="streamed runs")
    parser.add_argument("--seconds", type=float, default=4.0, help="each non-streamed run")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    client, upstream = args.pair.split(",")
    sc = bench.Scenario("ab", client, upstream, args.concurrency, stream=args.stream,
                        chunks=args.chunks if args.stream else 0, interval_ms=args.interval_ms,
                        requests_per_conn=args.requests_per_conn,
                        duration=None if args.stream else args.seconds,
                        ramp_s=args.chunks * args.interval_ms / 1000 if args.stream else 0.0)
    mock, port = bench.start_mock(0)
    proxies: list[bench.Proxy] = []
    try:
        with tempfile.TemporaryDirectory(prefix="llm-proxy-ab-") as tmp:
            targets = {}
            for name, root in (("A", args.a.resolve()), ("B", args.b.resolve())):
                proxy = bench.start_proxy(f"http://127.0.0.1:{port}/v1", Path(tmp), name=f"proxy-{name}", root=root)
                proxies.append(proxy)
                targets[name] = bench.Target(name, proxy.url, bench.CLIENT_KEY, proxy.process.pid)
            for target in targets.values():
                bench.warm_up(target, Path(tmp))
                target.idle_cpu_rate = bench.measure_idle_rate(target)
            ratios, cpu, p50 = [], {"A": [], "B": []}, {"A": [], "B": []}
            for i in range(args.rounds):
                order = ("A", "B") if i % 2 == 0 else ("B", "A")
                got = {}
                for name in order:
                    t = targets[name]
                    result = bench.run_load(t, t.url, t.key, sc, bench.MODELS[upstream], Path(tmp))
                    got[name] = per_request_us(result)
                    figure = "ttft_ms" if args.stream else "latency_ms"
                    p50[name].append(result.get("summary", {}).get(figure, {}).get("p50"))
                    if got[name] is not None:
                        cpu[name].append(got[name])
                a, b = got["A"], got["B"]
                ratio = b / a if a and b else None
                if ratio is not None:
                    ratios.append(ratio)
                print(f"round {i + 1}: A {bench.fmt(a, 0)} µs/request, B {bench.fmt(b, 0)} µs/request, "
                      f"B/A {bench.fmt(ratio, 3)}", flush=True)
            print(f"A median {bench.spread(cpu['A'], 0)} µs/request; B median {bench.spread(cpu['B'], 0)} µs/request")
            print(f"{'time to first token' if args.stream else 'latency'} p50 ms: A {bench.spread(p50['A'], 3)}, "
                  f"B {bench.spread(p50['B'], 3)}")
            print(f"B/A median of paired ratios {bench.spread(ratios, 3)} over {len(ratios)} rounds")
    finally:
        for proxy in proxies:
            bench.stop(proxy.process)
        bench.stop(mock, signal.SIGTERM)


if __name__ == "__main__":
    main()
