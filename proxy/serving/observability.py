"""What gunicorn's master does for an instance's metrics and log format.

Owns two gunicorn settings concerns, added to the settings by `with_metrics_and_log_format`:

* The directory the workers count Prometheus metrics in (prometheus-client's multiprocess mode,
  proxy/ops/metrics.py). `PROMETHEUS_MULTIPROC_DIR` must be set before a worker imports
  prometheus_client, so the master sets it at start (`on_starting`), before it forks any worker.
  One directory per running instance — per master process — under the state directory:

      <directory of state_path>/llm-proxy-metrics/<master pid>/
          .lock                          flock held by the master (and, inherited, its workers)
          counter_<worker pid>.db        prometheus-client's files, one set per worker process
          histogram_<worker pid>.db
          gauge_livesum_<worker pid>.db  the live gauges: open streams, workers alive

  A new master starts with an empty directory of its own, so two instances sharing a state
  directory (gunicorn's USR2 upgrade runs the old and the new master side by side) never count
  into each other's files; it also removes the directories of instances that are gone (nobody holds
  their lock), and its own when it exits. With `state_path: null` the directory is a private
  temporary one (mkdtemp), removed at exit. When a worker dies, however it died, the master removes
  its live-gauge file (`child_exit`): its streams and itself no longer count as open and alive,
  while its counters stay in the sums — prometheus-client's rule for a dead process.
* The logger class: `logging.format: json` is read here, before gunicorn's first line, so that
  every line of the log, gunicorn's own included, is a JSON object (proxy.serving.access_log).

Stdlib only, like proxy/serving/settings.py: the master imports it before gevent patches the
standard library, and prometheus_client imports ssl — so marking a worker dead is done here by hand,
the way prometheus_client.multiprocess.mark_process_dead does it (tests/unit/test_metrics_dir.py
checks the two agree).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
INSTANCES_DIR = "llm-proxy-metrics"
LOCK_FILE = ".lock"
JSON_LOGGER = "proxy.serving.access_log.JsonProxyLogger"


@dataclass
class MetricsDir:
    path: str
    lock_fd: int
    temporary: bool


_instance: MetricsDir | None = None  # this master's directory


def _config() -> Any:
    """The config gunicorn will serve, or None if it cannot be read (on_starting then says why)."""
    from proxy.config import ConfigError, load  # import-light: stdlib and PyYAML

    path = os.environ.get("LLM_PROXY_CONFIG")
    if not path:
        return None
    try:
        return load(path)
    except ConfigError:
        return None


def with_metrics_and_log_format(options: dict[str, Any]) -> dict[str, Any]:
    """`options` (gunicorn settings) with this module's hooks run after any already set there."""
    config = _config()
    if config is not None and config.logging.format == "json":
        options["logger_class"] = JSON_LOGGER
    # gunicorn checks each hook's arity, so each chain is spelled out.
    starting, exiting, child_exit = options.get("on_starting"), options.get("on_exit"), options.get("child_exit")

    def on_starting(server: Any) -> None:
        if starting is not None:
            starting(server)
        _prepare(server)

    def on_exit(server: Any) -> None:
        if exiting is not None:
            exiting(server)
        _remove()

    def on_child_exit(server: Any, worker: Any) -> None:
        if child_exit is not None:
            child_exit(server, worker)
        mark_dead(worker.pid)

    options.update(on_starting=on_starting, on_exit=on_exit, child_exit=on_child_exit)
    return options


def _lock(path: str) -> int | None:
    """An exclusive lock on `path`'s lock file, or None if a running instance holds it."""
    fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def prepare(state_path: str | None, pid: int) -> MetricsDir:
    """This instance's empty metrics directory, locked; stale ones of instances gone removed."""
    if state_path is not None:
        parent = os.path.join(os.path.dirname(os.path.abspath(state_path)), INSTANCES_DIR)
        try:
            os.makedirs(parent, mode=0o700, exist_ok=True)
            for name in os.listdir(parent):
                other = os.path.join(parent, name)
                if name.isdigit() and name != str(pid) and os.path.isdir(other):
                    fd = _lock(other)
                    if fd is not None:  # its instance is gone
                        shutil.rmtree(other, ignore_errors=True)
                        os.close(fd)
            path = os.path.join(parent, str(pid))
            shutil.rmtree(path, ignore_errors=True)  # a directory left by an earlier process of this pid
            os.makedirs(path, mode=0o700)
            fd = _lock(path)
            if fd is not None:
                return MetricsDir(path, fd, temporary=False)
        except OSError:
            pass  # an unwritable state directory: count in a temporary directory instead
    path = tempfile.mkdtemp(prefix="llm-proxy-metrics-")
    fd = _lock(path)
    assert fd is not None  # nobody else knows this directory
    return MetricsDir(path, fd, temporary=True)


def _prepare(server: Any) -> None:
    global _instance
    config = _config()
    _instance = prepare(config.state_path if config is not None else None, os.getpid())
    os.environ[METRICS_DIR_ENV] = _instance.path
    server.log.info("Prometheus metrics directory: %s", _instance.path)


def mark_dead(pid: int, path: str | None = None) -> None:
    """A worker is gone: drop its share of the live gauges (its counters stay)."""
    path = path or (_instance.path if _instance else None)
    if path is None:
        return
    for name in glob.glob(os.path.join(path, f"gauge_live*_{pid}.db")):
        with contextlib.suppress(FileNotFoundError):  # removed by a concurrent call
            os.remove(name)


def _remove() -> None:
    global _instance
    if _instance is None:
        return
    shutil.rmtree(_instance.path, ignore_errors=True)
    os.close(_instance.lock_fd)
    _instance = None
