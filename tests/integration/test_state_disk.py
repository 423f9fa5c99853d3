"""A state disk that fills up, or turns read-only, under a live proxy: requests go on being served on
the last known pool state; /readyz says degraded and why; `llm_proxy_state_store_up{backend="sqlite"}`
is 0 and /metrics keeps answering (its files are not on that disk: proxy/serving/instance.py); usage
rows and limit charges are kept in memory; and once the disk takes writes again, everything kept is
written — usage totals equal the requests the client made, and the key's token counter equals the
tokens usage recorded (proxy/ops/usage_buffer.py, proxy/limits/limiter.py).

The disk is a small tmpfs the test mounts itself: it needs root (CI runs as root); without root the
test skips and says so."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.state import schema
from tests.conftest import DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.integration.test_metrics import scrape, value
from tests.integration.test_pool import ADMIN_KEY, admin
from tests.integration.test_reload import until
from tests.integration.traffic import KEY, Traffic
from tests.wire import request


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting the small filesystem this test fills needs root (CI runs as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    assert mounted.returncode == 0, f"could not mount a tmpfs as root: {mounted.stderr}"
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of `disk` (as a log or a backup filling the state disk would)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        for size in (65536, 4096, 512):  # unbuffered: nothing left to flush when the disk says no
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as full:
        (disk / "probe").write_bytes(b"x" * 4096)
    assert full.value.errno == errno.ENOSPC
    return filler


def readiness(server: ProxyServer) -> dict[str, Any]:
    return dict(request(server.url, "GET", "/readyz").json())


def usage_totals(server: ProxyServer) -> dict[str, Any]:
    status, body = admin(server, "GET", "/admin/usage")
    assert status == 200, body
    return dict(body["totals"])


def tokens_counted(server: ProxyServer) -> int:
    status, body = admin(server, "GET", "/admin/keys")
    assert status == 200
    (key,) = [k for k in body["data"] if k["name"] == "disk-team"]
    return int(key["budget"]["tokens_per_day"]["used"])


def check_counts(server: ProxyServer, sent: int) -> None:
    """Everything kept in memory has been written: nothing lost, nothing twice."""
    until(lambda: usage_totals(server)["requests"] == sent, seconds=30)
    totals = usage_totals(server)
    assert totals["requests"] == sent and totals["errors"] == 0
    until(lambda: tokens_counted(server) == totals["input_tokens"] + totals["output_tokens"], seconds=30)
    assert value(scrape(server), "llm_proxy_state_store_up", backend="sqlite") == 1.0
    assert "Traceback" not in server.log()


def disk_config(demo: DemoUpstream, disk: Path) -> dict[str, Any]:
    return base_config(demo.url, admin_keys=[ADMIN_KEY], state_path=str(disk / "state.db"),
                       client_keys=[{"name": "disk-team", "key": KEY,
                                     "limits": {"tokens_per_day": 10_000_000, "requests_per_minute": 100_000}}],
                       metrics={"enabled": True})


def test_a_state_disk_that_fills_mid_traffic_loses_no_count(demo_upstream: DemoUpstream, small_disk: Path,
                                                           tmp_path: Path) -> None:
    server = start_proxy(disk_config(demo_upstream, small_disk), tmp_path, workers=2)
    traffic = None
    try:
        traffic = Traffic(server)
        traffic.until_sent(20)
        filler = fill(small_disk)
        degraded = until(lambda: (r := readiness(server)).get("state") == "degraded" and r, seconds=30)
        assert (degraded["state_backend"], degraded["state_reason"]) == ("sqlite", "the state file's disk is full")
        traffic.until_sent(30)  # served while the disk refuses every write
        samples = scrape(server)  # /metrics answers: its files are elsewhere
        assert value(samples, "llm_proxy_state_store_up", backend="sqlite") == 0.0
        filler.unlink()
        until(lambda: readiness(server).get("state") == "ok", seconds=30)
        traffic.until_sent(20)
        sent = traffic.stop()
        assert not traffic.failures, traffic.failures[:5]
        traffic = None
        check_counts(server, sent)
    finally:
        if traffic is not None:
            traffic.stop()
        stop_proxy(server)


def test_a_state_disk_read_only_at_start_stops_the_start_with_one_line(demo_upstream: DemoUpstream,
                                                                       small_disk: Path, tmp_path: Path) -> None:
    """A WAL file on a read-only filesystem cannot even be opened (SQLite needs its shared-memory
    file): an operator must act, and the line says what. A disk that turns read-only under a running
    proxy is the full disk's case (the same error class, kept and written later): a live filesystem
    cannot be remounted read-only under files open for writing, so the unit tests meet that one
    with SQLite's own SQLITE_READONLY (tests/unit/test_state_schema.py)."""
    config = disk_config(demo_upstream, small_disk)
    schema.migrate(config["state_path"])
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    server = start_proxy(config, tmp_path, workers=2)
    assert server.process.wait(timeout=60) == 2
    lines = [line for line in server.log().splitlines() if line.startswith("llm-proxy:")]
    assert len(lines) == 1 and "is mounted read-only" in lines[0] and "state_path" in lines[0]
