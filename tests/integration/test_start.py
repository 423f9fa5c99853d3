"""Starting the proxy as teams do, and the faults a start meets: eight workers at once on a fresh
and on an existing state file, beside a `check-config` and a second instance starting on another
file; another process holding the state file's lock while the proxy starts; a worker that cannot
start while its neighbours serve; a state file the proxy cannot use. Every start serves; a
transient failure is waited out or restarted, never fatal; only a configuration error stops a
start, with one line naming it (proxy/state/schema.py, proxy/serving/master.py, worker.py).

The full count — thirty starts of each kind, the lock held ten seconds — is bench/start_storm.py;
here a few of each (LLM_PROXY_START_REPEATS)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.state.schema import CURRENT_VERSION
from tests.conftest import CLIENT_KEY, ROOT, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY, admin
from tests.integration.test_reload import until
from tests.integration.upstreams import openai_client

REPEATS = int(os.environ.get("LLM_PROXY_START_REPEATS", "2"))
WORKERS = 8
LLM_PROXY = [sys.executable, "-m", "proxy.serving.cli"]
BOOT_FAILURES = ("Worker failed to boot", "exited with code", "could not start", "Traceback")


def config_for(demo: DemoUpstream, state: Path) -> dict[str, Any]:
    return base_config(demo.url, admin_keys=[ADMIN_KEY], state_path=str(state))


def workers_alive(server: ProxyServer) -> int:
    status, body = admin(server, "GET", "/admin/status")
    return int(body["workers"]) if status == 200 else 0


def serves(server: ProxyServer) -> None:
    """A request is answered, and every worker has booted and counts itself alive."""
    answer = openai_client(server).chat.completions.create(
        model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
    assert answer.choices[0].message.content
    until(lambda: workers_alive(server) == WORKERS, seconds=60)
    assert server.log().count("Booting worker with pid") == WORKERS
    for sign in BOOT_FAILURES:
        assert sign not in server.log(), f"{sign!r} in the log:\n{server.log()[-3000:]}"


@pytest.mark.parametrize("state_file", ["fresh", "existing"])
def test_eight_workers_start_and_serve_every_time_beside_a_check_and_another_instance(
        demo_upstream: DemoUpstream, tmp_path: Path, state_file: str) -> None:
    shared = tmp_path / "shared"  # both instances' files in one directory, as on a busy host
    shared.mkdir()
    checks_failed: list[str] = []
    stop_checking = threading.Event()
    config_path = tmp_path / "check.yaml"
    config_path.write_text(yaml.safe_dump(config_for(demo_upstream, shared / "state.db")))

    def check_config_meanwhile() -> None:
        while not stop_checking.is_set():
            done = subprocess.run([*LLM_PROXY, "check-config", str(config_path)], capture_output=True, text=True,
                                  cwd=ROOT)
            if done.returncode != 0:
                checks_failed.append(done.stderr)

    checker = threading.Thread(target=check_config_meanwhile)
    checker.start()
    try:
        for attempt in range(REPEATS):
            if state_file == "fresh":
                for leftover in shared.glob("state*.db*"):
                    leftover.unlink()
            first_dir, second_dir = tmp_path / f"a{attempt}", tmp_path / f"b{attempt}"
            first_dir.mkdir()
            second_dir.mkdir()
            first = start_proxy(config_for(demo_upstream, shared / "state.db"), first_dir, workers=WORKERS)
            second = start_proxy(config_for(demo_upstream, shared / "state-other.db"), second_dir, workers=WORKERS)
            try:
                serves(first)
                serves(second)
            finally:
                stop_proxy(first)
                stop_proxy(second)
    finally:
        stop_checking.set()
        checker.join(timeout=60)
    assert not checks_failed, checks_failed[:3]


HOLD = textwrap.dedent("""
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.readline()
    db.execute("ROLLBACK")
    db.close()
    print("released", flush=True)
""")


class LockHolder:
    """Another process holding the state file's lock (a backup, a `state export`, another instance)."""

    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "locked"

    def release(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == "released"
        self.process.wait(timeout=10)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def test_a_start_waits_for_a_lock_another_process_holds_on_the_empty_state_file_and_serves(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    state.touch()  # the empty file a new install has
    holder = LockHolder(state)
    try:
        server = start_proxy(config_for(demo_upstream, state), tmp_path, workers=WORKERS)
        try:
            until(lambda: "is locked by another process" in server.log(), seconds=30)  # the master waits, and says so
            assert server.process.poll() is None
            holder.release()
            serves(server)
        finally:
            stop_proxy(server)
    finally:
        holder.kill()


def test_a_worker_that_cannot_start_is_replaced_and_the_host_stays_up(demo_upstream: DemoUpstream,
                                                                      tmp_path: Path) -> None:
    """The state file goes away for a while (a network mount's hiccup, an operator's mistake) just
    as a worker must start: the worker cannot open it — and never creates an empty one in its
    place — exits, and the master starts another, over and over without stopping the server,
    until one can."""
    state = tmp_path / "state.db"
    server = start_proxy(config_for(demo_upstream, state), tmp_path, workers=2,
                         extra_env={"LLM_PROXY_STATE_OPEN_WAIT": "0.5"})
    try:
        until(lambda: workers_alive(server) == 2, seconds=60)
        state.rename(tmp_path / "state.db.away")
        try:
            os.kill(worker_pids(server)[0], signal.SIGKILL)
            until(lambda: server.log().count("could not start") >= 2, seconds=60)
            assert server.process.poll() is None
            assert "Worker failed to boot" not in server.log() and not state.exists()
        finally:
            (tmp_path / "state.db.away").rename(state)
        until(lambda: workers_alive(server) == 2, seconds=60)
        answer = openai_client(server).chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
        assert answer.choices[0].message.content
    finally:
        stop_proxy(server)


def worker_pids(server: ProxyServer) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def test_a_state_file_the_proxy_cannot_use_stops_the_start_with_one_line(demo_upstream: DemoUpstream,
                                                                         tmp_path: Path) -> None:
    server = start_proxy(config_for(demo_upstream, tmp_path / "no-such-directory" / "state.db"), tmp_path)
    assert server.process.wait(timeout=60) == 2
    lines = [line for line in server.log().splitlines() if line.startswith("llm-proxy:")]
    assert lines == [f"llm-proxy: config error: state_path: {tmp_path / 'no-such-directory' / 'state.db'}: cannot "
                     "create the state file (No such file or directory): does its directory exist, and may this "
                     "user write there?"]
    assert "Traceback" not in server.log() and "Booting worker" not in server.log()


def test_state_migrate_and_check_for_operators(tmp_path: Path, demo_upstream: DemoUpstream) -> None:
    config = tmp_path / "config.yaml"
    state = tmp_path / "state.db"
    config.write_text(yaml.safe_dump(config_for(demo_upstream, state)))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*LLM_PROXY, "state", *args, "--config", str(config)], capture_output=True, text=True,
                              cwd=ROOT)

    missing = run("check")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    migrated = run("migrate")
    assert migrated.returncode == 0 and f"schema version 0 → {CURRENT_VERSION}" in migrated.stdout
    again = run("migrate")
    assert again.returncode == 0 and f"already at schema version {CURRENT_VERSION}" in again.stdout
    checked = run("check")
    assert checked.returncode == 0, checked.stderr
    assert f"schema version {CURRENT_VERSION}" in checked.stdout and "journal mode wal, integrity ok" in checked.stdout
    assert CLIENT_KEY not in checked.stdout + checked.stderr
    bare = subprocess.run([*LLM_PROXY, "state", "export", "--config", str(config)], capture_output=True, text=True,
                          cwd=ROOT)
    assert bare.returncode == 2 and "state export needs FILE" in bare.stderr
