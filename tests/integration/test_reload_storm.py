"""A storm of reloads through a live proxy: twenty SIGHUPs in ten seconds, good and bad files
alternating, while fifty streams are open and new requests keep arriving. Nothing is dropped or
failed, every worker ends on the last good file even though the file last written is bad, and
each bad file is one line in the log, naming its first error (proxy/serving/config_snapshots.py:
the workers load the text the master checked, never the file)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from openai import OpenAI

from proxy.blueprints.state import app_state
from proxy.config import load
from proxy.serving import config_snapshots, instance
from proxy.serving.app import create_app
from tests.conftest import CLIENT_KEY, DemoUpstream, start_proxy, stop_proxy
from tests.integration.test_reload import keys_seen, one_upstream, rewrite, served_config, until
from tests.integration.upstreams import words
from tests.state_files import migrated

STREAMS = 50
SIGNALS = 20
SPACING = 0.5  # seconds between two SIGHUPs: the storm's schedule, not a wait for anything
WORKERS = 2


def good(demo: DemoUpstream, n: int) -> dict[str, Any]:
    """The n-th good file: its own account, so a request shows which file served it."""
    return one_upstream(demo, "main", {f"storm-{n}": f"sk-storm-{n}"})


def bad(demo: DemoUpstream, n: int) -> dict[str, Any]:
    """The n-th bad file: a good one with an unknown key of its own, the first (and only) error."""
    return {**good(demo, n), f"bogus_{n}": True}


def test_twenty_reloads_in_ten_seconds_drop_nothing_and_end_on_the_last_good_file(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(good(demo_upstream, 0), tmp_path, workers=WORKERS)
    failures: list[str] = []
    expected = words(40)
    try:
        assert served_config(server)["generation"] == 1
        api = OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=60)
        opened = threading.Barrier(STREAMS + 1)
        ended = threading.Event()

        def stream(i: int) -> None:
            try:
                # ~12 s of deltas, 300 ms apart: open across the whole storm
                chunks = api.chat.completions.create(
                    model="demo-model", stream=True,
                    messages=[{"role": "user", "content": f"storm {i} [demo:words=40] [demo:pace=300]"}])
                text = ""
                for n, chunk in enumerate(chunks):
                    if n == 0:
                        opened.wait(timeout=60)
                    if chunk.choices:
                        text += chunk.choices[0].delta.content or ""
                if text != expected:
                    failures.append(f"stream {i}: got {len(text)} chars, not the whole answer")
            except Exception as exc:
                failures.append(f"stream {i}: {type(exc).__name__}: {exc}")

        sent = [0]

        def keep_asking() -> None:
            while not ended.is_set():
                try:
                    answer = api.chat.completions.create(
                        model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
                    if not answer.choices[0].message.content:
                        failures.append("a request got an empty answer")
                except Exception as exc:
                    failures.append(f"request {sent[0]}: {type(exc).__name__}: {exc}")
                sent[0] += 1

        streams = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
        for thread in streams:
            thread.start()
        opened.wait(timeout=60)  # every stream has its first delta: all fifty are open
        asker = threading.Thread(target=keep_asking)
        asker.start()

        log = server.log
        for n in range(1, SIGNALS + 1):  # good files at odd n, bad ones at even n: the last file is bad
            slot = time.monotonic() + SPACING
            rewrite(server, good(demo_upstream, n) if n % 2 else bad(demo_upstream, n))
            server.process.send_signal(signal.SIGHUP)
            if n % 2:
                # The master has read and accepted this good file; the next, bad one is written at
                # once — while the workers are still being told to reload. A worker that read the
                # file itself now would find the bad one.
                until(lambda n=n: log().count("config reload: ") >= (n + 1) // 2)
            time.sleep(max(0.0, slot - time.monotonic()))  # the storm's schedule: a SIGHUP every half second

        for thread in streams:
            thread.join(timeout=90)
        ended.set()
        asker.join(timeout=60)
        assert not failures, "\n".join(failures[:10])
        assert sent[0] > 0

        refused_files = [n for n in range(1, SIGNALS + 1) if n % 2 == 0]
        refused = until(lambda: [line for line in log().splitlines() if "config reload refused" in line]
                        if log().count("config reload refused") >= len(refused_files) else None)
        assert len(refused) == len(refused_files)  # one line per bad file, and none from the workers
        for line, n in zip(refused, refused_files, strict=True):
            assert f"bogus_{n}: unknown key" in line

        last_good = max(n for n in range(1, SIGNALS + 1) if n % 2)
        generation = 1 + SIGNALS // 2  # each good file of the storm accepted once, after the first start
        seen: dict[int, int] = {}

        def every_worker_on_the_last_good_file() -> bool:
            found = served_config(server)
            seen[found["worker"]] = found["generation"]
            return len(seen) == WORKERS and set(seen.values()) == {generation}

        until(every_worker_on_the_last_good_file, seconds=30)
        request_id = f"storm-after-{time.monotonic_ns()}"
        api.with_options(default_headers={"X-Request-Id": request_id}).chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "hi [demo:words=1] [demo:pace=0]"}])
        assert keys_seen(demo_upstream, request_id) == [f"sk-storm-{last_good}"]
        assert "Worker failed to boot" not in log() and "exited with code" not in log()
    finally:
        stop_proxy(server)


def test_a_worker_loads_what_the_master_accepted_not_the_file_as_it_stands(
        demo_upstream: DemoUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the storm can hit, made certain: the master accepts a good file and tells the
    workers; before a worker gets to it, the file is rewritten into a bad one. The worker switches
    to the good text the master checked, and says nothing of the bad file (the master will, once)."""
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv(instance.RUN_DIR_ENV, str(run))
    monkeypatch.delenv(instance.INSTANCE_ENV, raising=False)  # restored after the test: create() sets it
    made = instance.create(os.getpid())  # as gunicorn's master makes it before forking
    try:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump({**good(demo_upstream, 0), "state_path": migrated(tmp_path / "state.db")}))
        app = create_app(load(str(path)), start_background=False)
        reloader = app_state(app).reloader
        accepted = yaml.safe_dump({**good(demo_upstream, 1), "state_path": str(tmp_path / "state.db")})
        config_snapshots.write(2, accepted)  # the master's acceptance of generation 2…
        path.write_text(yaml.safe_dump({**bad(demo_upstream, 2), "state_path": str(tmp_path / "state.db")}))
        assert reloader.reload()  # …and the worker's SIGHUP, after the file changed again
        state = app_state(app)
        assert state.config_generation == 2
        assert [a.id for a in state.config.upstreams[0].accounts] == ["storm-1"]
        assert reloader.reload()  # a second SIGHUP for the same generation changes nothing
        assert app_state(app) is state
    finally:
        instance.remove(made)
