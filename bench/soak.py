"""Soak: mixed traffic with faults for N minutes; prints requests, unexpected outcomes, latencies,
RSS and open file descriptors over time, then checks that usage counted what was sent.

    python bench/soak.py [--minutes 30] [--concurrency 32] [--workers 2] [--report-every 60]
                         [--faults upstream,sighup,kill,disk,failover] [--fault-period 20]
                         [--until-each-fault]

Starts the demo upstream and two proxies (gunicorn + gevent, three accounts each) the way the tests
do: one on the SQLite backend — its state file on a small tmpfs the soak mounts (root only; without
root the disk fault is left out, and said) — and one on Redis through Sentinel (a primary, a replica
and three sentinels on loopback: tests/redis_server.py). Client threads, half on each proxy, send a
mix over all three protocols, streaming and not: plain answers, tool calls, upstream 500s, errors
mid-stream, connections dropped mid-stream, and clients that hang up after the first event.

Faults, one after another every `--fault-period` seconds, among those asked for:
- upstream: one account answers 429 (Retry-After 2 s) or 401 for a period, then is put back;
- sighup: a reload storm on each proxy — 20 SIGHUPs in 10 s, good and bad files alternating;
- kill: SIGKILL of one worker of each proxy (its clients' connections end: expected);
- disk: the SQLite proxy's state disk filled for a while, then freed;
- failover: the Redis primary killed; the sentinels promote the replica.

Every answer is checked the way its SDK would read it: a plain request must succeed (an account
could always serve it), a failed one must be a protocol-shaped error or an in-band error with the
protocol's terminator. A request cut while its proxy lost a worker is expected; anything else is
unexpected, and the first few are printed. At the end, each proxy's `/admin/usage` must count every
request its clients had answered, and no more than those plus the ones cut by a kill (a killed
worker's rows die with it); and RSS and file descriptors must be flat within 10 % between the first
and the last third of the run. Exit status 1 if any check fails. Not part of CI (a short run of it is, until every
fault was made once: tests/integration/test_soak.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import ProxyServer, start_demo_upstream, start_proxy, stop_proxy
from tests.integration.test_faults import assert_protocol_error, body_for, completed, in_band_error
from tests.integration.test_pool import ADMIN_KEY
from tests.redis_server import SentinelCluster, start_sentinel_cluster
from tests.wire import request

PROTOCOLS = ("chat_completions", "messages", "responses")
CLIENT_KEY = "sk-soak-client"
KEYS = ["sk-soak-0", "sk-soak-1", "sk-soak-2"]
FAULTS = ("upstream", "sighup", "kill", "disk", "failover")
# kind: (weight, directive added to the prompt)
MIX = {"plain": (70, "[demo:words=20] [demo:pace=10]"), "tool": (10, "[demo:tool] [demo:pace=5]"),
       "status_500": (5, "[demo:status=500]"), "fail_midstream": (5, "[demo:fail-midstream] [demo:pace=5]"),
       "drop": (5, "[demo:drop] [demo:pace=5]"), "hangup": (5, "[demo:words=200] [demo:pace=20]")}
ANSWERED = ("ok", "expected_error", "in_band_error", "hangup")


@dataclass
class Target:
    """One proxy under soak, what its clients saw, and when it lost a worker."""

    name: str
    server: ProxyServer
    config: dict[str, Any]
    lock: threading.Lock = field(default_factory=threading.Lock)
    outcomes: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    kills: list[tuple[float, float]] = field(default_factory=list)  # (killed at, replaced by)

    def record(self, outcome: str, started: float, ttfb: float | None, error: str | None) -> None:
        ended = time.monotonic()
        with self.lock:
            if error is not None and any(start - 1 <= ended and started <= end + 1 for start, end in self.kills):
                outcome, error = "cut_by_kill", None  # its worker was killed under it: expected
            self.outcomes[outcome] += 1
            if ttfb is not None:
                self.ttfb.append(ttfb)
            self.total.append(ended - started)
            if error:
                self.unexpected.append(error)

    def take(self) -> tuple[Counter[str], list[float], list[float]]:
        with self.lock:
            taken = (self.outcomes.copy(), self.ttfb, self.total)
            self.ttfb, self.total = [], []
            return taken


def one_request(url: str, kind: str, protocol: str, stream: bool) -> tuple[str, float | None, str | None]:
    """Send one request and judge what came back; returns (outcome, ttfb, error description)."""
    path, body = body_for(protocol, "demo-model", stream, tools=kind == "tool")
    prompt = f"soak {MIX[kind][1]}"
    if protocol == "responses":
        body["input"] = prompt
    else:
        body["messages"][0]["content"] = prompt
    started = time.monotonic()
    resp = request(url, "POST", path, body, {"Authorization": f"Bearer {CLIENT_KEY}", "anthropic-version": "2023-06-01",
                                             "X-Request-Id": f"soak-{uuid.uuid4().hex}"}, timeout=60)
    ttfb = time.monotonic() - started  # the status line and headers: the proxy sends them with the first event
    try:
        if kind == "hangup" and stream and resp.status == 200:
            first = resp.next_chunk()
            return "hangup", ttfb, None if first else "no first event before hang-up"
        raw = resp.body()
    finally:
        resp.close()
    expected_fail = kind in ("status_500",) or (not stream and kind in ("fail_midstream", "drop"))
    try:
        if resp.status != 200:
            assert_protocol_error(protocol, raw)
            return ("expected_error" if expected_fail else "UNEXPECTED_STATUS"), ttfb, (
                None if expected_fail else f"{kind} {protocol} stream={stream}: HTTP {resp.status} {raw[:200]!r}")
        if stream and kind in ("fail_midstream", "drop"):
            in_band_error(protocol, raw)
            return "in_band_error", ttfb, None
        completed(protocol, raw) if stream else None
        return "ok", ttfb, None
    except (AssertionError, ValueError, KeyError, IndexError) as exc:
        return "MALFORMED", ttfb, f"{kind} {protocol} stream={stream}: {exc!r} {raw[-300:]!r}"


def client_loop(target: Target, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    kinds, weights = list(MIX), [w for w, _ in MIX.values()]
    while not stop.is_set():
        kind = rng.choices(kinds, weights)[0]
        protocol, stream = rng.choice(PROTOCOLS), rng.random() < 0.8
        started = time.monotonic()
        try:
            outcome, ttfb, error = one_request(target.server.url, kind, protocol, stream)
        except Exception as exc:  # a timeout is a hang (the worst outcome); a cut before any answer, a kill's
            outcome, ttfb, error = "CLIENT_ERROR", None, f"{kind} {protocol} stream={stream}: {exc!r}"
        target.record(outcome, started, ttfb, error)


# ---------------------------------------------------------------- faults

class Faults:
    def __init__(self, demo: Any, targets: list[Target], cluster: SentinelCluster | None, disk: Path | None,
                 period: float, enabled: list[str]) -> None:
        self.demo, self.targets, self.cluster, self.state_disk = demo, targets, cluster, disk
        self.period, self.enabled = period, enabled
        self.rng = random.Random(7)
        self.done: Counter[str] = Counter()
        self.failed: list[str] = []
        self.each_made = threading.Event()  # set once every enabled fault was made (or failed) once

    def run(self, stop: threading.Event) -> None:
        turn = 0
        while not stop.wait(self.period):
            fault = self.enabled[turn % len(self.enabled)]
            turn += 1
            try:
                getattr(self, fault)(stop)
                self.done[fault] += 1
                say(f"fault: {fault} done")
            except Exception as exc:  # a fault that could not be made is said, and fails the run at its end
                self.failed.append(f"{fault}: {exc!r}")
                say(f"fault: {fault} failed to apply: {exc!r}")
            if turn >= len(self.enabled):
                self.each_made.set()

    def upstream(self, stop: threading.Event) -> None:
        """One account at a time answers 429 (and cools) or 401 (and is disabled); the last fault is
        cleared and the accounts put back first, as an operator would. Two accounts are always
        healthy, so every plain request can be served: a 503 for one is an error."""
        self.demo.control("/_demo/keys", method="DELETE")
        for target in self.targets:
            for idx in range(len(KEYS)):
                with contextlib.suppress(OSError):
                    resp = request(target.server.url, "POST", f"/admin/accounts/main/acct-{idx}/enable", None,
                                   {"Authorization": f"Bearer {ADMIN_KEY}"})
                    resp.body()
                    resp.close()
        key = self.rng.choice(KEYS)
        fault = {"status": 429, "headers": {"Retry-After": "2"}} if self.rng.random() < 0.5 else {"status": 401}
        self.demo.control("/_demo/keys", body={key: fault})

    def sighup(self, stop: threading.Event) -> None:
        """20 SIGHUPs in 10 s on each proxy, good and bad files alternating; the good file last."""
        for n in range(20):
            for target in self.targets:
                good = n % 2 == 1
                text = target.config if good else {**target.config, f"bogus_{n}": True}
                (target.server.log_path.parent / "config.yaml").write_text(yaml.safe_dump(text))
                target.server.process.send_signal(signal.SIGHUP)
            time.sleep(0.5)

    def kill(self, stop: threading.Event) -> None:
        for target in self.targets:
            workers = children(target.server.process.pid)
            if not workers:
                continue
            victim = self.rng.choice(workers)
            killed = time.monotonic()
            with target.lock:
                target.kills.append((killed, killed + 60))
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (victim in children(target.server.process.pid)
                                                   or len(children(target.server.process.pid)) < len(workers)):
                time.sleep(0.05)
            replaced = time.monotonic()
            with target.lock:
                target.kills[-1] = (killed, replaced + 1)  # a request cut up to a second later is the kill's
            say(f"  {target.name}: worker {victim} killed, replaced in {replaced - killed:.2f}s")

    def disk(self, stop: threading.Event) -> None:
        if self.state_disk is None:
            return
        filler = self.state_disk / "filler"
        fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            for size in (65536, 4096, 512):
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * size)
        finally:
            os.close(fd)
        stop.wait(min(10.0, self.period / 2))
        filler.unlink()

    def failover(self, stop: threading.Event) -> None:
        if self.cluster is not None:
            started = time.monotonic()
            self.cluster.fail_over_by_killing_the_primary()
            say(f"  redis: primary killed, replica promoted in {time.monotonic() - started:.1f}s")


def children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


# ---------------------------------------------------------------- measures

def tree_rss_mb(pid: int) -> float:
    total = 0
    for p in [pid, *children(pid)]:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def worker_fds(pid: int) -> int:
    total = 0
    for c in children(pid):
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{c}/fd"))
    return total


def pct(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.0f}"


def usage_requests(target: Target) -> int | None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        resp = request(target.server.url, "GET", "/admin/usage", None, {"Authorization": f"Bearer {ADMIN_KEY}"})
        body = resp.json()
        resp.close()
        if resp.status == 200:
            return int(body["totals"]["requests"])
    return None


def say(line: str) -> None:
    print(line, flush=True)


# ---------------------------------------------------------------- the run

@dataclass
class Report:
    requests: int = 0
    unexpected: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)  # failed checks, in words
    faults: Counter[str] = field(default_factory=Counter)
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unexpected and not self.checks


def proxy_config(demo_url: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"client_keys": [CLIENT_KEY], "admin_keys": [ADMIN_KEY], **state, "upstreams": [{
        "name": "main", "protocol": "chat_completions", "base_url": demo_url,
        "pool": {"probe": {"interval": 5}, "cooldown": 2},
        "accounts": [{"id": f"acct-{i}", "api_key": key} for i, key in enumerate(KEYS)]}]}


def run(minutes: float, concurrency: int = 32, workers: int = 2, faults: list[str] | None = None,
        fault_period: float = 20, report_every: float = 60, until_each_fault: bool = False) -> Report:
    """The soak for `minutes`; with `until_each_fault`, `minutes` is only the cap: it ends one
    `fault_period` of traffic after every fault was made once (CI's short run)."""
    faults = list(FAULTS if faults is None else faults)
    report = Report()
    tmp = Path(tempfile.mkdtemp(prefix="llm-proxy-soak-"))
    demo = start_demo_upstream()
    disk: Path | None = None
    if "disk" in faults:
        if os.geteuid() == 0:
            disk = tmp / "disk"
            disk.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", str(disk)], check=True)
        else:
            faults.remove("disk")
            say("soak: not root, so the state disk cannot be mounted and filled: the disk fault is left out")
    cluster = start_sentinel_cluster() if "failover" in faults else None
    targets: list[Target] = []
    env = {"LLM_PROXY_ACCESS_LOG": "/dev/null"}
    try:
        sqlite_config = proxy_config(demo.url, {"state_path": str((disk or tmp) / "state.db")})
        (tmp / "sqlite").mkdir()
        targets.append(Target("sqlite", start_proxy(dict(sqlite_config), tmp / "sqlite", env, workers), sqlite_config))
        if cluster is not None:
            sentinel_config = proxy_config(demo.url, {"state_path": str(tmp / "sentinel-state.db"), "state": {
                "backend": "redis", "sentinel": {"hosts": cluster.hosts, "service_name": cluster.service}}})
            (tmp / "sentinel").mkdir()
            targets.append(Target("sentinel", start_proxy(dict(sentinel_config), tmp / "sentinel", env, workers),
                                  sentinel_config))
        stop = threading.Event()
        threads = [threading.Thread(target=client_loop, args=(targets[i % len(targets)], stop, i), daemon=True)
                   for i in range(concurrency)]
        maker = Faults(demo, targets, cluster, disk, fault_period, faults)
        threads.append(threading.Thread(target=maker.run, args=(stop,), daemon=True))
        for thread in threads:
            thread.start()
        say(f"soak: {minutes} min, {concurrency} clients over {', '.join(t.name for t in targets)}, {workers} "
            f"worker(s) each; faults {', '.join(faults) or 'none'} every {fault_period:g}s; logs in {tmp}")
        say(f"{'t (s)':>6} {'proxy':>8} {'reqs':>7} {'unexp':>5} {'ttfb p50':>9} {'ttfb p99':>9} {'total p99':>10} "
            f"{'RSS MB':>7} {'fds':>5}  outcomes")
        began = time.monotonic()
        samples: dict[str, list[tuple[float, float, int]]] = {t.name: [] for t in targets}
        ends = began + minutes * 60
        while time.monotonic() < ends:
            wait = min(report_every, max(0.1, ends - time.monotonic()))
            if until_each_fault and not maker.each_made.is_set() and maker.each_made.wait(wait):
                ends = min(ends, time.monotonic() + fault_period)  # the last fault's aftermath, then stop
                wait = max(0.1, ends - time.monotonic())
            time.sleep(wait)
            now = time.monotonic() - began
            for target in targets:
                outcomes, ttfb, total = target.take()
                rss, fds = tree_rss_mb(target.server.process.pid), worker_fds(target.server.process.pid)
                samples[target.name].append((now, rss, fds))
                line = (f"{now:6.0f} {target.name:>8} {sum(outcomes.values()):7d} {len(target.unexpected):5d} "
                        f"{pct(ttfb, 0.5):>9} {pct(ttfb, 0.99):>9} {pct(total, 0.99):>10} {rss:7.1f} {fds:5d}  "
                        f"{dict(sorted(outcomes.items()))}")
                report.lines.append(line)
                say(line)
        stop.set()
        for thread in threads:
            thread.join(timeout=90)
        report.faults = maker.done
        report.checks += [f"a fault could not be made: {f}" for f in maker.failed]
        for target in targets:
            answered = sum(target.outcomes[o] for o in ANSWERED)
            cut = target.outcomes["cut_by_kill"]
            report.requests += sum(target.outcomes.values())
            report.unexpected += [f"{target.name}: {e}" for e in target.unexpected]
            counted = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # what was kept in memory (a full disk, a failover) lands
                counted = usage_requests(target)
                if counted is not None and answered <= counted <= answered + cut:
                    break
                time.sleep(1)
            say(f"{target.name}: {sum(target.outcomes.values())} requests, {answered} answered, {cut} cut by a "
                f"worker kill; /admin/usage counts {counted}")
            if counted is None or not answered <= counted <= answered + cut:
                report.checks.append(f"{target.name}: usage counts {counted}, the load generator {answered} answered "
                                     f"(+ {cut} cut by kills)")
            drift = _drift(samples[target.name])
            if drift is not None:
                say(f"{target.name}: RSS {drift[0]:+.1%}, file descriptors {drift[1]:+.1%} (first third → last)")
                if minutes >= 10 and (abs(drift[0]) > 0.10 or abs(drift[1]) > 0.10):
                    report.checks.append(f"{target.name}: RSS {drift[0]:+.1%}, fds {drift[1]:+.1%}: not flat "
                                         "within 10%")
    finally:
        for target in targets:
            stop_proxy(target.server)
        demo.process.terminate()
        if cluster is not None:
            cluster.stop()
        if disk is not None:
            subprocess.run(["umount", "-l", str(disk)], check=False)
        if report.ok:
            shutil.rmtree(tmp, ignore_errors=True)
    return report


def _drift(samples: list[tuple[float, float, int]]) -> tuple[float, float] | None:
    """RSS and fd change from the first third of the samples to the last third (means)."""
    if len(samples) < 3:
        return None
    third = max(1, len(samples) // 3)
    first, last = samples[:third], samples[-third:]

    def mean(rows: list[tuple[float, float, int]], i: int) -> float:
        return sum(r[i] for r in rows) / len(rows)

    return (mean(last, 1) / mean(first, 1) - 1, mean(last, 2) / max(1.0, mean(first, 2)) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--report-every", type=float, default=60)
    parser.add_argument("--fault-period", type=float, default=20)
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"among {', '.join(FAULTS)}; '' for none")
    parser.add_argument("--until-each-fault", action="store_true",
                        help="end one fault period after every fault was made once (--minutes is then the cap)")
    args = parser.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown fault(s): {', '.join(sorted(unknown))}")
    report = run(args.minutes, args.concurrency, args.workers, faults, args.fault_period, args.report_every,
                 args.until_each_fault)
    say(f"\ntotal: {report.requests} requests; faults made: {dict(report.faults)}; "
        f"unexpected: {len(report.unexpected)}")
    for line in report.unexpected[:10]:
        say("  " + line[:400])
    for line in report.checks:
        say("check failed: " + line)
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
