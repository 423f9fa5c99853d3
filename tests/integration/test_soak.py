"""A short run of bench/soak.py in CI: mixed traffic on a SQLite proxy and a Redis-through-Sentinel
proxy until every fault the soak knows was made once, one every 5 s — an upstream account failing, a reload storm,
a worker killed, the state disk filled and freed (as root), the Redis primary killed. No unexpected
outcome, and each proxy's usage counts every request its clients had answered (the 30-minute run,
with the RSS and file-descriptor checks, is the bench's: `python bench/soak.py`)."""

from __future__ import annotations

import importlib.util
import os
import sys

from tests.conftest import ROOT


def test_traffic_through_every_fault() -> None:
    spec = importlib.util.spec_from_file_location("bench_soak", ROOT / "bench" / "soak.py")
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    sys.modules["bench_soak"] = soak  # its dataclasses look their module up while it loads
    spec.loader.exec_module(soak)
    report = soak.run(minutes=4, concurrency=16, workers=2, fault_period=5, report_every=10, until_each_fault=True)
    expected = set(soak.FAULTS) - (set() if os.geteuid() == 0 else {"disk"})
    assert set(report.faults) == expected, report.faults
    assert report.requests > 1000
    assert not report.unexpected, "\n".join(report.unexpected[:10])
    assert not report.checks, "\n".join(report.checks)
