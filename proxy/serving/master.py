"""gunicorn's master process (the arbiter), as the proxy needs it.

Owns what the master does for the proxy, through gunicorn's hooks:

- `on_starting`, before any worker starts: the config checked (an invalid one stops gunicorn with
  exit status 2 and one line naming the key and the problem, as `llm-proxy serve` does), the worker
  class and count checked (anything but the proxy's gevent worker is refused: a sync or threaded
  worker serves one request at a time, so streams and health checks would hang), the control
  socket placed beside the state file (one per instance, rather than gunicorn's per-user default
  that every instance on the machine would share), the state file created and migrated
  (proxy/state/schema.py — here, once, so workers only open it) with the secrets generated beside
  it (the compaction key, the runtime keys' pepper), and the arbiter's SIGHUP handler
  replaced;
- SIGHUP: the config reload. gunicorn's own would restart every worker, and the old workers would
  get only `graceful_timeout` to finish their streams — LLM streams run for minutes. Here the
  master reads the file once and validates that text (an invalid one: one line in the log, and
  everything goes on as it was), keeps it as the next generation (proxy.serving.config_snapshots)
  and tells each worker, which loads that generation — not the file, which may have changed again —
  and swaps it in for new requests while requests in flight finish on the old
  (proxy.serving.reconfigure). `Arbiter.run` dispatches a signal to
  `getattr(arbiter, "handle_" + name)`, so setting the attribute is enough, under `llm-proxy
  serve` and a plain `gunicorn -c python:proxy.serving.gunicorn_conf` alike; gunicorn's control
  socket `reload` sends the master a SIGHUP and gets the same;
- `when_ready`: the startup summary (proxy.serving.summary) — printed, or one JSON log line under
  `logging.format: json`.

Keeps the config it accepted last and how many reloads it has accepted: a worker forked later
inherits both (`accepted()`), so it boots on a config known to be valid whatever the file says now.

Import-light: stdlib, PyYAML and the pure codecs — it runs before gevent patches anything.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

from proxy import logs
from proxy.config import Config, ConfigError, load
from proxy.config.load import read_text
from proxy.conversations.compaction_key import compaction_secret
from proxy.keys.pepper import ensure_pepper_file
from proxy.protocols import registry
from proxy.serving import config_check, config_snapshots
from proxy.serving.summary import summary, summary_fields
from proxy.state import schema

_accepted: tuple[Config, int] | None = None  # the config the master serves, and its generation


def accepted() -> tuple[Config, int] | None:
    """In a worker: the config its master had accepted when it forked the worker, and its generation."""
    return _accepted


def _refuse(message: str) -> None:
    print(f"llm-proxy: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def on_starting(arbiter: Any) -> None:
    global _accepted
    path = os.environ.get("LLM_PROXY_CONFIG")
    try:
        if not path:
            raise ConfigError("", "set LLM_PROXY_CONFIG to the path of the YAML config file")
        loaded = load(path)
        logs.configure(loaded.log_level, loaded.logging.format)  # this process's lines in the workers' format
        config = registry.resolve(loaded)
    except ConfigError as exc:
        _refuse(f"config error: {exc}")
        return
    for note in config.deprecated:  # said once per server start, not by every worker
        logging.getLogger("proxy.config").warning("%s", note)
    cfg = arbiter.cfg
    if not getattr(cfg.worker_class, "serves_llm_proxy", False):
        _refuse(f"worker class {cfg.worker_class_str!r} cannot serve the proxy: it needs its gevent worker, "
                "proxy.serving.worker.ProxyGeventWorker (the packaged settings' default; a sync or threaded "
                "worker serves one request at a time, so streams and health checks hang) — drop -k/--worker-class")
    if cfg.workers < 1:
        _refuse(f"workers: must be at least 1 (got {cfg.workers}; set by --workers or LLM_PROXY_WORKERS)")
    _accepted = (config, 1)
    _place_control_socket(cfg, config)
    _prepare_state(arbiter, config)
    if config.state.backend == "redis":
        _check_redis(arbiter, config)
    arbiter.handle_hup = lambda: _reload(arbiter)


def _prepare_state(arbiter: Any, config: Config) -> None:
    """Create and migrate the state file here, once, before any worker exists: workers only open
    it, so workers starting together have nothing to race over (proxy/state/schema.py). Another
    process holding its lock (a backup, a `state export`, a second instance starting) is waited out,
    with a line every few seconds; a file that cannot be used stops the start with one line."""
    if config.state_path is None:
        return
    path = os.path.abspath(config.state_path)

    def waiting(waited: float) -> None:
        arbiter.log.warning("state file %s is locked by another process (a backup, a `state export`, another "
                            "instance starting?); waiting for it (%.0fs so far)", path, waited)

    try:
        found, now = schema.migrate(path, on_wait=waiting)
    except schema.StateFileError as exc:
        _refuse(f"config error: state_path: {exc}")
        return
    if found != now:
        arbiter.log.info("state file %s: schema version %d → %d", path, found, now)
    try:  # generated here too, once, rather than raced for by the workers
        compaction_secret(config)
    except OSError as exc:  # the workers try again; a key they cannot read or write stops only them
        arbiter.log.warning("could not prepare the compaction key beside %s (%s); the workers will try", path, exc)
    # The runtime keys' pepper likewise (with Redis it lives in Redis, the same for every host).
    if config.keys.pepper is None and config.state.backend != "redis":
        try:
            ensure_pepper_file(path)
        except OSError as exc:
            arbiter.log.warning("could not prepare the keys' pepper beside %s (%s); the workers will try", path, exc)


def _check_redis(arbiter: Any, config: Config) -> None:
    """Try Redis once before any worker starts: a password it refuses stops the start with one line
    (every worker would fail the same way); a Redis that does not answer is said, and waited out by
    the workers, degraded. Done in a child process: the master must not import redis (it imports
    ssl, which the gevent workers must patch first)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer through the pipe, never return into gunicorn
        os.close(read)
        try:
            from proxy.state.redis_connection import check

            problem = check(config.state)
            answer = f"away {problem}" if problem else "ok"
        except ConfigError as exc:
            answer = f"config {exc}"
        except BaseException as exc:  # whatever it is, the parent must hear of it
            answer = f"away {type(exc).__name__}: {exc}"
        os.write(write, answer.encode()[:4000])
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read().decode(errors="replace")
    os.waitpid(pid, 0)
    kind, _, detail = answer.partition(" ")
    if kind == "config":
        _refuse(f"config error: {detail}")
    elif kind != "ok":
        arbiter.log.warning("Redis (%s) does not answer at start (%s); starting degraded — the workers use it as "
                            "soon as it answers", config.state.shown_url, detail or "no answer")


def _place_control_socket(cfg: Any, config: Config) -> None:
    """Beside the state file (`<state_path>.ctl`), unless set on the command line; with no state
    file (`state_path: null`) the instance has no directory of its own, and no control socket."""
    setting = cfg.settings["control_socket"]
    if cfg.control_socket_disable or setting.value != setting.default:
        return
    if config.state_path is None:
        cfg.set("control_socket_disable", True)
    else:
        cfg.set("control_socket", os.path.abspath(config.state_path) + ".ctl")


def _reload(arbiter: Any) -> None:
    """SIGHUP: read the file once and check that text; if it is good, it becomes the next
    generation (proxy.serving.config_snapshots) and every worker switches to it (SIGHUP to each)."""
    global _accepted
    assert _accepted is not None
    current, generation = _accepted
    path = os.environ.get("LLM_PROXY_CONFIG") or current.source
    try:
        text = read_text(path)
        config = config_check.for_reload(current, path, text)
        config_snapshots.write(generation + 1, text)
    except Exception as exc:  # whatever is wrong with the file, the master goes on as it was
        arbiter.log.error("config reload refused, still serving the previous config: %s", exc)
        return
    _accepted = (config, generation + 1)
    arbiter.log.info("config reload: %s accepted (generation %d); telling %d worker(s)", path, generation + 1,
                     len(arbiter.WORKERS))
    arbiter.kill_workers(signal.SIGHUP)
    from proxy.serving.reload_audit import record_reload  # the stores: only once a reload is accepted

    record_reload(config, path, generation + 1, arbiter.log)


def when_ready(arbiter: Any) -> None:
    """The listening sockets are open: say what is being served, once, on stdout."""
    if _accepted is None:
        return
    cfg = arbiter.cfg
    control = None if cfg.control_socket_disable else cfg.control_socket
    config, listeners = _accepted[0], [str(s) for s in arbiter.LISTENERS]
    if cfg.is_ssl:  # gunicorn names its sockets http:// whatever they serve (server.tls)
        listeners = [s.replace("http://", "https://", 1) for s in listeners]
    if config.logging.format == "json":  # every line of a JSON log is one object, this one too
        headline, fields = summary_fields(config, listeners, cfg.workers, control, arbiter.pid)
        fields = {"summary": headline, **{label.replace(" ", "_"): text for label, text in fields.items()}}
        logging.getLogger("proxy.serving").info("startup", extra={"event": "startup", "fields": fields})
        return
    print(summary(config, listeners, cfg.workers, control, arbiter.pid), flush=True)
