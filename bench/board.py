"""The board's capacity lanes, for `bench/run.py --focus --only board`: how many streams the proxy
sustains, and the memory it holds while it does.

Owns, for each of the board's pairs:
  * the sustained-streams ladder: LADDER concurrencies of streams of DELTAS deltas PACE_MS apart
    (PER_CONN streams one after another on each connection, the connections' first requests spread
    over one stream's length, so every level holds its c streams open together for two stream
    lengths and the connect burst is spread too). A level passes when every stream completes with
    every delta and no delta arrives later than LATE_MS after the mock stamped it (the frame delay
    of the board's latency lane; the load generator's --late-ms counts the late ones). A target
    climbs until a level fails; it sustains the last level it passed. The same ladder straight to
    the mock is the rig's own ceiling (the mock and the load generator share a core): a proxy figure
    equal to it is rig-bound, the rig and not the proxy is what stopped the climb. The machine may
    be shared: a level starts once the machine is nearly idle (Quiet, bounded), and a proxy level
    that fails while other processes took a fifth of the proxy's cores (/proc/stat less the proxy's
    own CPU) is run once more;
  * the memory lane, on a proxy freshly started for the pair and warmed up: its RSS (the process
    tree, master and workers) once idle, the peak while it held the streams of its highest passing
    level (and that less idle per open stream), and once the load has ended and its connections
    are closed, waited for by polling until the RSS and the open descriptors settle (settle);
  * the two tables of these figures (report).

bench/run.py owns the processes and the load generator's runs and hands them in (Rig), so this
module imports nothing from it (run.py runs as __main__). A level's runs keep their summaries, not
every request's record (thousands of streams a level).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from functools import partial
from typing import Any, Protocol

# Finer at the bottom: one gevent worker on one of this machine's cores sustains fewer than 250 (it
# spends ~100 µs a delta at 50 deltas a second per stream).
LADDER = (100, 150, 200, 250, 500, 750, 1000, 1250, 1500)
DELTAS = 64  # the same streams as the board's latency lane (run.py's BOARD_DELTAS)
PACE_MS = 20.0
LATE_MS = 10 * PACE_MS
PER_CONN = 3
RAMP_S = DELTAS * PACE_MS / 1000  # one stream's length
TIMEOUT_S = 10.0  # per stream: a 1.28 s stream not done in 10 s has failed; no need to wait 30 s more
# A proxy level is disturbed when other processes took more than this share of the proxy's own cores
# (their busy time from /proc/stat less the proxy's CPU; ~0.1 is the kernel's share of a quiet run).
# A failing level that was disturbed is run once more: the machine may be shared.
DISTURBED_SHARE = 0.2
TICK = os.sysconf("SC_CLK_TCK")
# Before each level, the machine is waited for until it is nearly idle (under QUIET_SHARE of a core
# over QUIET_WINDOW_S: between levels the rig's own processes idle, so what runs is someone else's),
# for at most QUIET_BOUND_S a level and QUIET_BUDGET_S a trial (a load that lasts is measured under).
QUIET_SHARE, QUIET_WINDOW_S, QUIET_BOUND_S, QUIET_BUDGET_S = 0.1, 0.5, 15.0, 60.0
ALL_CORES = set(range(os.cpu_count() or 1))
# Settled: neither the open descriptors nor the RSS (within SETTLE_RSS_KIB) moved for SETTLE_QUIET_S.
SETTLE_QUIET_S, SETTLE_STEP_S, SETTLE_BOUND_S, SETTLE_RSS_KIB = 1.0, 0.1, 15.0, 256


class Rig(Protocol):
    """What the lanes need from bench/run.py. A proxy is whatever fresh_proxy yields; None is the mock."""

    # The proxy's cores if no part of the rig runs on them (else empty: who else ran there is not told).
    proxy_only_cores: set[int]

    def fresh_proxy(self, client: str) -> AbstractContextManager[Any]: ...

    def streams(self, proxy: Any | None, client: str, upstream: str, c: int) -> dict[str, Any]: ...

    def pids(self, proxy: Any) -> list[int]: ...

    def rss_kib(self, proxy: Any) -> int: ...


def level_key(client: str, upstream: str | None, c: int) -> str:
    return f"sustain|{client}|{upstream or 'direct'}|c{c}"


def memory_key(client: str, upstream: str) -> str:
    return f"sustainmem|{client}|{upstream}"


def passed(res: dict[str, Any], c: int) -> bool:
    s = res.get("summary")
    if not s:
        return False  # the load generator itself failed
    return s["errors"] == 0 and s["requests"] == c * PER_CONN and s["deltas"] == s["expected_deltas"] \
        and s.get("late", 0) == 0 and (s["delay_ms"]["max"] or 0) <= LATE_MS


def open_fds(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with suppress(OSError):
            total += len(os.listdir(f"/proc/{pid}/fd"))
    return total


def settle(rss: Callable[[], int], pids: Callable[[], list[int]]) -> dict[str, Any]:
    """Poll until neither the open descriptors nor the RSS moved for SETTLE_QUIET_S (the connections
    the last load left are closed and what their greenlets held is freed, or kept), or SETTLE_BOUND_S
    passed. Called once the load generator has exited, i.e. closed its side of every connection."""
    start = time.monotonic()
    need = round(SETTLE_QUIET_S / SETTLE_STEP_S) + 1
    window: list[tuple[int, int]] = []
    while True:
        window = [*window[1 - need:], (rss(), open_fds(pids()))]
        waited = time.monotonic() - start
        rsses = [r for r, _ in window]
        quiet = len(window) == need and len({f for _, f in window}) == 1 and max(rsses) - min(rsses) <= SETTLE_RSS_KIB
        if quiet or waited >= SETTLE_BOUND_S:
            return {"rss_kib": window[-1][0], "fds": window[-1][1], "waited_s": round(waited, 2), "settled": quiet}
        time.sleep(SETTLE_STEP_S)


def busy_ticks(cores: set[int]) -> int:
    """Clock ticks the cores spent on anything but idle and I/O wait since boot (/proc/stat)."""
    total = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                ticks = [int(v) for v in fields]
                total += sum(ticks) - ticks[3] - ticks[4]
    return total


class Quiet:
    """Waits for a nearly idle machine before a level (QUIET_*), out of one budget for the trial."""

    def __init__(self) -> None:
        self.left = QUIET_BUDGET_S

    def wait(self) -> float:
        """Poll until the machine was nearly idle for a window, or the bound; the seconds waited."""
        start = time.monotonic()
        bound = min(QUIET_BOUND_S, self.left)
        while time.monotonic() - start < bound:
            before = busy_ticks(ALL_CORES)
            time.sleep(QUIET_WINDOW_S)
            if (busy_ticks(ALL_CORES) - before) / TICK < QUIET_SHARE * QUIET_WINDOW_S:
                break
        waited = time.monotonic() - start
        self.left = max(self.left - waited, 0.0)
        return round(waited, 1)


def measured(run_level: Callable[[int], dict[str, Any]], c: int, cores: set[int], quiet: Quiet) -> dict[str, Any]:
    """One level, once the machine is quiet; with cores, the CPU others took on them meanwhile (others_s)."""
    waited = quiet.wait()
    before = busy_ticks(cores) if cores else 0
    res = run_level(c)
    res["waited_quiet_s"] = waited
    if cores and "cpu_s" in res:
        res["others_s"] = round(max((busy_ticks(cores) - before) / TICK - res["cpu_s"], 0.0), 2)
    return res


def disturbed(res: dict[str, Any], cores: set[int]) -> bool:
    return res.get("others_s", 0) > DISTURBED_SHARE * res.get("wall_s", 0) * len(cores)


def climb(run_level: Callable[[int], dict[str, Any]], who: str, pair: str, quiet: Quiet,
          cores: set[int] | frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    """The ladder from the bottom, until a level fails (once more, if others disturbed it)."""
    out = []
    for c in LADDER:
        res = measured(run_level, c, set(cores), quiet)
        res.update(level=c, passed=passed(res, c))
        if not res["passed"] and disturbed(res, set(cores)):
            first = describe(res)
            print(f"  {who:8} sustain {pair:36} c={c:<5} failed, disturbed: {first}; once more", flush=True)
            res = measured(run_level, c, set(cores), quiet)
            res.update(level=c, passed=passed(res, c), disturbed_before=first)
        out.append(res)
        waited = f", after {res['waited_quiet_s']:g} s waiting for a quiet machine" if res["waited_quiet_s"] > 1 else ""
        print(f"  {who:8} sustain {pair:36} c={c:<5} {describe(res) if 'summary' in res else res.get('failed')}"
              f"{'' if res['passed'] else '  FAILED'} ({res.get('wall_s', 0):.1f}s{waited})", flush=True)
        if not res["passed"]:
            break
    return out


def describe(res: dict[str, Any]) -> str:
    s = res["summary"]
    at = s.get("late_at_s")  # when the first and the last late delta arrived, s from the first start
    when = f", late from {at[0]:g} to {at[1]:g} s in" if at else ""
    text = (f"{s['errors']} errors, {s.get('late', 0):,} late of {s['deltas']:,}/{s['expected_deltas']:,} deltas "
            f"(max {s['delay_ms']['max'] or 0:,.0f} ms{when})")
    if "cpu_s" in res:  # the proxy's: whether it ran out of CPU, or others took its core
        text += f", proxy CPU {res['cpu_s']:.1f} s in {res['wall_s']:.1f} s"
    if "others_s" in res:
        text += f", others {res['others_s']:.1f} s on its cores"
    return text + (f", RSS peak {res['rss_peak_kib'] / 1024:.0f} MiB" if "rss_peak_kib" in res else "")


def run_lanes(rig: Rig, pairs: list[tuple[str, str]], label: Callable[[str, str], str],
              add: Callable[[str, str, dict[str, Any]], None]) -> None:
    """Both lanes for every pair: the ladder straight to the mock (once per client protocol), then a
    fresh proxy: idle RSS, the ladder through it, the RSS after."""
    direct_done: set[str] = set()
    quiet = Quiet()
    for client, upstream in pairs:
        pair = label(client, upstream)
        if client not in direct_done:
            direct_done.add(client)
            for res in climb(partial(rig.streams, None, client, upstream), "direct", pair, quiet):
                add("direct", level_key(client, None, res["level"]), res)
        with rig.fresh_proxy(client) as proxy:
            rss, pids = partial(rig.rss_kib, proxy), partial(rig.pids, proxy)
            idle = settle(rss, pids)
            for res in climb(partial(rig.streams, proxy, client, upstream), "proxy", pair, quiet,
                             rig.proxy_only_cores):
                add("proxy", level_key(client, upstream, res["level"]), res)
            after = settle(rss, pids)
            print(f"  proxy    sustain {pair:36} RSS idle {idle['rss_kib'] / 1024:.1f} MiB, after "
                  f"{after['rss_kib'] / 1024:.1f} MiB ({'settled' if after['settled'] else 'not settled'} in "
                  f"{after['waited_s']:g} s)", flush=True)
            add("proxy", memory_key(client, upstream), {"idle": idle, "after": after})


# ---------------------------------------------------------------- report

def ceiling(levels: list[dict[str, Any]]) -> tuple[int, dict[str, Any] | None]:
    """The last level passed before the first failure (0: none), and the failing level (None: none failed)."""
    best, failed = 0, None
    for res in sorted(levels, key=lambda r: r["level"]):
        if not res["passed"]:
            failed = res
            break
        best = res["level"]
    return best, failed


def report(runs: list[dict[str, Any]], pairs: list[tuple[str, str]], label: Callable[[str, str], str],
           table: Callable[[str, str, list[str], list[list[str]]], None], fmt: Callable[..., str],
           spread: Callable[..., str]) -> None:
    trials = sorted({r["trial"] for r in runs})

    def levels(trial: int, target: str, client: str, upstream: str | None) -> list[dict[str, Any]]:
        prefix = level_key(client, upstream, 0)[:-1]
        return [r for r in runs if r["trial"] == trial and r["target"] == target and r["key"].startswith(prefix)
                and "level" in r]

    def failure(failed: dict[str, Any] | None, best: int) -> str:
        if failed is None:
            return f"none (passed {best:,})"
        if "summary" not in failed:
            return f"c={failed['level']:,}: {failed.get('failed')}"
        again = " (run twice: others disturbed the first)" if "disturbed_before" in failed else ""
        return f"c={failed['level']:,}: {describe(failed)}{again}"

    def per_trial(texts: list[str]) -> str:
        return texts[0] if len(texts) == 1 else "; ".join(f"trial {i + 1}: {t}" for i, t in enumerate(texts))

    stream_rows, memory_rows = [], []
    for client, upstream in pairs:
        sustained, rig, bound, fails, rig_fails = [], [], [], [], []
        idle, peak, per_stream, after, waited, fds = [], [], [], [], [], []
        for trial in trials:
            proxy_levels = levels(trial, "proxy", client, upstream)
            direct_levels = levels(trial, "direct", client, None)
            if not proxy_levels:
                continue
            best, failed = ceiling(proxy_levels)
            sustained.append(best)
            fails.append(failure(failed, best))
            if direct_levels:
                top, rig_failed = ceiling(direct_levels)
                rig.append(top)
                rig_fails.append(failure(rig_failed, top))
                bound.append("ladder top" if best == top == LADDER[-1] else "yes" if best == top else "no")
            mem = next((r for r in runs if r["trial"] == trial and r["key"] == memory_key(client, upstream)), None)
            if mem is None:
                continue
            idle.append(mem["idle"]["rss_kib"])
            after.append(mem["after"]["rss_kib"])
            fds.append(f"{mem['idle']['fds']} / {mem['after']['fds']}")
            waited.append(mem["after"]["waited_s"] if mem["after"]["settled"] else None)
            top_run = next((r for r in proxy_levels if r["level"] == best and "rss_peak_kib" in r), None)
            if top_run is not None:
                peak.append(top_run["rss_peak_kib"])
                per_stream.append((top_run["rss_peak_kib"] - mem["idle"]["rss_kib"]) / best)
        bound_text = bound[0] if len(set(bound)) == 1 else \
            ", ".join(f"{b} in {bound.count(b)} of {len(bound)} trials" for b in sorted(set(bound)))
        held = spread(sustained, 0) if any(sustained) else f"< {LADDER[0]}" if sustained else "—"
        stream_rows.append([label(client, upstream), held, spread(rig, 0), bound_text or "—",
                            per_trial(fails) if fails else "—", per_trial(rig_fails) if rig_fails else "—"])
        memory_rows.append([label(client, upstream), spread([v / 1024 for v in idle], 1),
                            spread([v / 1024 for v in peak], 1), held, spread(per_stream, 1),
                            spread([v / 1024 for v in after], 1), spread(waited, 1) if any(waited) else "not settled",
                            "; ".join(fds) or "—"])
    table(f"The board's lanes: streams sustained ({DELTAS} deltas {PACE_MS:g} ms apart)",
          f"The highest concurrency of a ladder ({', '.join(f'{c:,}' for c in LADDER)}) at which every stream "
          f"completed with every delta and none arrived later than {LATE_MS:g} ms (10 times the pace) after the mock "
          f"stamped it; a target climbs until a level fails. {PER_CONN} streams one after another on each "
          f"connection, the connections' first requests spread over one stream's length ({RAMP_S:g} s), so a level "
          "holds its streams open together for two stream lengths. Direct = the same ladder straight to the mock: "
          "the rig's own ceiling (the mock and the load generator, on the cores the pinning gives them); rig-bound "
          "= the proxy's figure is that ceiling, so the rig, not the proxy, stopped the climb. The proxy is freshly "
          f"started for each pair. The machine may be shared: a level starts once it is nearly idle (at most "
          f"{QUIET_BOUND_S:g} s waited, {QUIET_BUDGET_S:g} s a trial), and a proxy level that failed while other "
          f"processes took more than {DISTURBED_SHARE:.0%} of the proxy's cores is run once more (others = the CPU "
          "they took there meanwhile; ~10 % is the kernel's share of a quiet run).",
          ["pair", "sustained streams", "direct (rig) ceiling", "rig-bound?", "proxy's first failing level",
           "direct's first failing level"], stream_rows)
    table("The board's lanes: memory",
          "The proxy's RSS (master + workers), freshly started for the pair: idle = after warm-up, before the "
          "ladder; peak = the most sampled (every 0.2 s) while it held the streams of its highest passing level, "
          f"and (peak - idle) / those streams per open stream; after = once the ladder ended and its connections "
          f"closed, polled until neither the RSS (±{SETTLE_RSS_KIB} KiB) nor the open descriptors moved for "
          f"{SETTLE_QUIET_S:g} s (at most {SETTLE_BOUND_S:g} s). The descriptors after include the connections to "
          "the mock the proxy's pool keeps.",
          ["pair", "idle MiB", "steady-state peak MiB", "at streams", "KiB per open stream", "after load MiB",
           "settled after s", "open descriptors idle / after"], memory_rows)
