"""Start storm: the proxy started again and again with eight workers, as tests/integration/test_start.py
does a few times, at the full count; prints how every start went.

    python bench/start_storm.py [--starts 30] [--workers 8] [--hold 10]

For a fresh state file (removed before each start) and for an existing one: `--starts` starts of the
proxy with `--workers` gevent workers, each beside a second instance starting on another state file
in the same directory and a `llm-proxy check-config` running in a loop. A start counts as served
when a request is answered and every worker reports itself alive, with no worker failing to boot.
Then one start with another process holding the empty state file's write lock for `--hold`
seconds (a backup, a `state export`): it must wait, then serve. Prints, per kind, the starts that
served and the time from launch to the first answer and to all workers alive (median and
slowest). Exit status 1 if any start did not serve. Not part of CI.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import ROOT, DemoUpstream, start_demo_upstream, start_proxy, stop_proxy
from tests.integration import test_start
from tests.integration.test_start import BOOT_FAILURES, LLM_PROXY, LockHolder, config_for, workers_alive
from tests.integration.upstreams import openai_client


def one_start(demo: DemoUpstream, state: Path, folder: Path, workers: int) -> tuple[float, float] | str:
    """Launch, then (time to the first answer, time to every worker alive) — or what went wrong."""
    folder.mkdir()
    started = time.monotonic()
    server = start_proxy(config_for(demo, state), folder, workers=workers)
    try:
        answer = openai_client(server).chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
        if not answer.choices[0].message.content:
            return "an empty answer"
        first = time.monotonic() - started
        deadline = time.monotonic() + 120
        while workers_alive(server) != workers:
            if time.monotonic() > deadline or server.process.poll() is not None:
                return f"only {workers_alive(server)} of {workers} workers alive"
            time.sleep(0.05)
        every = time.monotonic() - started
        failures = [sign for sign in BOOT_FAILURES if sign in server.log()]
        return f"the log says {failures}" if failures else (first, every)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        stop_proxy(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--hold", type=float, default=10.0, help="seconds the lock is held at the last start")
    args = parser.parse_args()
    test_start.WORKERS = args.workers  # what workers_alive is compared with
    demo = start_demo_upstream()
    tmp = Path(tempfile.mkdtemp(prefix="llm-proxy-start-storm-"))
    shared = tmp / "shared"
    shared.mkdir()
    check_config = tmp / "check.yaml"
    check_config.write_text(yaml.safe_dump(config_for(demo, shared / "state.db")))
    stop, checks_failed = threading.Event(), [0]

    def check_meanwhile() -> None:
        while not stop.is_set():
            done = subprocess.run([*LLM_PROXY, "check-config", str(check_config)], capture_output=True, cwd=ROOT)
            checks_failed[0] += done.returncode != 0

    checker = threading.Thread(target=check_meanwhile, daemon=True)
    checker.start()
    failed = 0
    try:
        print(f"start storm: {args.starts} starts of each kind, {args.workers} workers, beside a second instance "
              "and check-config in a loop")
        print(f"{'kind':>10} {'served':>8} {'first answer p50 / max (s)':>28} {'all workers p50 / max (s)':>27}")
        for kind in ("fresh", "existing"):
            served: list[tuple[float, float]] = []
            problems: list[str] = []
            for n in range(args.starts):
                if kind == "fresh":
                    for leftover in shared.glob("state*.db*"):
                        leftover.unlink()
                outcome: list[tuple[float, float] | str] = []
                other = threading.Thread(target=lambda out=outcome, folder=tmp / f"{kind}-b{n}": out.append(
                    one_start(demo, shared / "state-other.db", folder, args.workers)))
                other.start()
                mine = one_start(demo, shared / "state.db", tmp / f"{kind}-a{n}", args.workers)
                other.join()
                for result in (mine, *outcome):
                    if isinstance(result, str):
                        problems.append(f"start {n}: {result}")
                    else:
                        served.append(result)
            failed += len(problems)
            firsts, everys = [s[0] for s in served], [s[1] for s in served]
            print(f"{kind:>10} {len(served):>4}/{2 * args.starts:<3} "
                  f"{statistics.median(firsts) if firsts else 0:>14.2f} / {max(firsts, default=0):<11.2f}"
                  f"{statistics.median(everys) if everys else 0:>13.2f} / {max(everys, default=0):<11.2f}")
            for problem in problems[:5]:
                print(f"  {problem}")
        for leftover in shared.glob("state*.db*"):
            leftover.unlink()
        (shared / "state.db").touch()
        holder = LockHolder(shared / "state.db")
        releaser = threading.Timer(args.hold, holder.release)
        releaser.start()
        result = one_start(demo, shared / "state.db", tmp / "held", args.workers)
        releaser.join()
        holder.kill()
        if isinstance(result, str):
            failed += 1
            print(f"  lock held {args.hold:g}s at start: {result}")
        else:
            print(f"  lock held {args.hold:g}s at start: first answer after {result[0]:.2f}s, all workers after "
                  f"{result[1]:.2f}s")
        print(f"check-config runs that failed meanwhile: {checks_failed[0]}")
    finally:
        stop.set()
        checker.join(timeout=30)
        demo.process.terminate()
        if not failed and not checks_failed[0]:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed or checks_failed[0] else 0)


if __name__ == "__main__":
    main()
