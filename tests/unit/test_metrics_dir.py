"""The per-instance metrics directory gunicorn's master prepares (proxy/serving/observability.py):
where it goes, that it starts empty, that the directories of instances gone are removed and those
of running ones kept, and that marking a worker dead removes what prometheus-client's own
mark_process_dead removes — no more, no less."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from gunicorn.config import Config
from prometheus_client.multiprocess import mark_process_dead

from proxy.serving import observability
from proxy.serving.access_log import JsonProxyLogger, ProxyLogger
from proxy.serving.observability import INSTANCES_DIR, LOCK_FILE, mark_dead, prepare

FILES = ["counter_101.db", "histogram_101.db", "gauge_all_101.db", "gauge_livesum_101.db", "gauge_liveall_101.db",
         "gauge_livemax_101.db", "gauge_sum_101.db", "gauge_livesum_1011.db", "counter_202.db",
         "gauge_livesum_202.db"]


def test_marking_a_worker_dead_removes_what_prometheus_client_removes(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for folder in (ours, theirs):
        folder.mkdir()
        for name in FILES:
            (folder / name).write_bytes(b"")
    mark_dead(101, str(ours))
    mark_process_dead(101, str(theirs))
    assert sorted(os.listdir(ours)) == sorted(os.listdir(theirs))
    assert "gauge_livesum_101.db" not in os.listdir(ours) and "counter_101.db" in os.listdir(ours)


def test_an_instance_gets_an_empty_locked_directory_of_its_own_under_the_state_directory(tmp_path: Path) -> None:
    parent = tmp_path / INSTANCES_DIR
    stale_same_pid = parent / "4242"
    stale_same_pid.mkdir(parents=True)
    (stale_same_pid / "counter_7.db").write_bytes(b"old")
    gone = parent / "1111"  # an instance that died without cleaning up: nobody holds its lock
    gone.mkdir()
    (gone / LOCK_FILE).write_bytes(b"")
    running = parent / "2222"  # an instance still running (its master holds the lock)
    running.mkdir()
    held = os.open(running / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    unrelated = parent / "notes"
    unrelated.mkdir()
    try:
        instance = prepare(str(tmp_path / "state.db"), 4242)
        assert instance.path == str(parent / "4242") and not instance.temporary
        assert os.listdir(instance.path) == [LOCK_FILE]
        assert sorted(os.listdir(parent)) == ["2222", "4242", "notes"]
        probe = os.open(Path(instance.path) / LOCK_FILE, os.O_RDWR)  # another open file: the lock conflicts
        try:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = False
            except BlockingIOError:
                locked = True
        finally:
            os.close(probe)
        assert locked
        os.close(instance.lock_fd)
    finally:
        os.close(held)


def test_without_a_state_file_or_a_writable_state_directory_the_directory_is_temporary(tmp_path: Path) -> None:
    instance = prepare(None, 1)
    assert instance.temporary and os.path.isdir(instance.path) and os.listdir(instance.path) == [LOCK_FILE]
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the state directory cannot be created: its parent is a file
    fallback = prepare(str(blocked / "state.db"), 1)
    assert fallback.temporary
    for made in (instance, fallback):
        os.close(made.lock_fd)
        observability.shutil.rmtree(made.path)


def test_json_logging_is_chosen_before_gunicorn_writes_a_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.serving.settings import settings

    config_path = tmp_path / "config.yaml"
    base = "client_keys: [k]\nupstreams: [{name: u, protocol: chat_completions, base_url: 'http://x/v1', " \
           "accounts: [{id: a, api_key: sk-unit-test}]}]\n"
    for text, logger in ((base, ProxyLogger), (base + "logging: {format: json}\n", JsonProxyLogger)):
        config_path.write_text(text)
        monkeypatch.setenv("LLM_PROXY_CONFIG", str(config_path))
        config = Config()
        for name, value in settings().items():
            config.set(name, value)  # every hook passes gunicorn's arity check
        assert config.logger_class is logger
