"""The per-instance directory gunicorn's master prepares (proxy/serving/instance.py), where the
workers count metrics (proxy/serving/observability.py): where it goes, that it starts empty, that
the directories of instances gone are removed and those of running ones kept, and that marking a
worker dead removes what prometheus-client's own mark_process_dead removes — no more, no less."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from gunicorn.config import Config
from prometheus_client.multiprocess import mark_process_dead

from proxy.serving import instance
from proxy.serving.access_log import JsonProxyLogger, ProxyLogger
from proxy.serving.instance import LOCK_FILE
from proxy.serving.observability import mark_dead

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


def _locked(path: str) -> bool:
    probe = os.open(Path(path) / LOCK_FILE, os.O_RDWR)  # another open file: the lock conflicts
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(probe)


def test_an_instance_gets_an_empty_locked_directory_of_its_own_in_the_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(instance.RUN_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(instance.INSTANCE_ENV, raising=False)
    gone = tmp_path / "llm-proxy-1111-abc"  # an instance that died without cleaning up: nobody holds its lock
    gone.mkdir()
    (gone / LOCK_FILE).write_bytes(b"")
    (gone / "metrics").mkdir()
    running = tmp_path / "llm-proxy-2222-def"  # an instance still running (its master holds the lock)
    running.mkdir()
    held = os.open(running / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    unrelated = tmp_path / "notes"
    unrelated.mkdir()
    try:
        made = instance.create(4242)
        try:
            assert Path(made.path).parent == tmp_path and Path(made.path).name.startswith("llm-proxy-4242-")
            assert sorted(os.listdir(made.path)) == [LOCK_FILE, "config", "metrics"]
            assert os.listdir(made.metrics) == [] and os.listdir(made.config) == []
            assert oct(os.stat(made.path).st_mode & 0o777) == "0o700"
            assert sorted(os.listdir(tmp_path)) == sorted([running.name, Path(made.path).name, "notes"])
            assert _locked(made.path)
            assert os.environ[instance.INSTANCE_ENV] == made.path  # what the workers it forks find
        finally:
            instance.remove(made)
        assert not os.path.exists(made.path)
    finally:
        os.close(held)


def test_the_run_directory_is_memory_backed_when_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never the state file's disk: one that fills up must not take the metrics (or the workers,
    which write them through memory maps) down with it."""
    monkeypatch.delenv(instance.RUN_DIR_ENV, raising=False)
    expected = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    assert instance.run_directory() == (expected or instance.tempfile.gettempdir())


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


def test_a_scrape_leaves_out_a_file_a_worker_is_just_creating(tmp_path: Path) -> None:
    """A worker booting creates its files empty and sizes them a moment later: a scrape (or
    /admin/status) that reads one then must count the others, not fail with a 500."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    from proxy.ops.metrics import ACTIVE_STREAMS, _Source

    written = MmapedDict(str(tmp_path / "gauge_livesum_101.db"))
    written.write_value(mmap_key(ACTIVE_STREAMS, ACTIVE_STREAMS, (), (), "gauge"), 3.0, 0.0)
    written.close()
    (tmp_path / "gauge_livesum_202.db").write_bytes(b"")  # created, not yet sized
    source = _Source(str(tmp_path), CollectorRegistry())
    assert source.live_gauges()[ACTIVE_STREAMS] == 3.0
    assert any(m.name == ACTIVE_STREAMS for m in source.collect())
