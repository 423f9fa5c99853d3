"""What gunicorn's master does for an instance's metrics and log format.

Owns two gunicorn settings concerns, added to the settings by `with_metrics_and_log_format`:

* The instance's directory (proxy/serving/instance.py), made at start (`on_starting`) before any
  worker is forked, and the directory the workers count Prometheus metrics in, its `metrics/`
  (prometheus-client's multiprocess mode, proxy/ops/metrics.py): `PROMETHEUS_MULTIPROC_DIR` must be
  set before a worker imports prometheus_client. Each worker writes files of its own there
  (`counter_<worker pid>.db`, `histogram_…`, `gauge_livesum_…` for the live gauges); a scrape sums
  them all. A new master starts with an empty directory of its own, so two instances never count
  into each other's files; the instance's directory is removed when the master exits. When a worker
  dies, however it died, the master removes its live-gauge file (`child_exit`): its streams and
  itself no longer count as open and alive, while its counters stay in the sums —
  prometheus-client's rule for a dead process.
* The logger class: `logging.format: json` is read here, before gunicorn's first line, so that
  every line of the log, gunicorn's own included, is a JSON object (proxy.serving.access_log).

Stdlib only, like proxy/serving/settings.py: the master imports it before gevent patches the
standard library, and prometheus_client imports ssl — so marking a worker dead is done here by hand,
the way prometheus_client.multiprocess.mark_process_dead does it (tests/unit/test_metrics_dir.py
checks the two agree).
"""

from __future__ import annotations

import contextlib
import glob
import os
from typing import Any

from proxy.serving import instance

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
JSON_LOGGER = "proxy.serving.access_log.JsonProxyLogger"

_instance: instance.Instance | None = None  # this master's directory


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


def _prepare(server: Any) -> None:
    global _instance
    _instance = instance.create(os.getpid())
    os.environ[METRICS_DIR_ENV] = _instance.metrics
    server.log.info("instance directory (metrics, accepted configs): %s", _instance.path)


def mark_dead(pid: int, path: str | None = None) -> None:
    """A worker is gone: drop its share of the live gauges (its counters stay)."""
    path = path or (_instance.metrics if _instance else None)
    if path is None:
        return
    for name in glob.glob(os.path.join(path, f"gauge_live*_{pid}.db")):
        with contextlib.suppress(FileNotFoundError):  # removed by a concurrent call
            os.remove(name)


def _remove() -> None:
    global _instance
    if _instance is None:
        return
    instance.remove(_instance)
    _instance = None
