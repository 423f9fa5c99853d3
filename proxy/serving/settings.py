"""Gunicorn settings, shared by `gunicorn.conf.py` and by `llm-proxy serve` / `llm-proxy demo`.

Owns how the service runs: gevent workers (one by default — a single gevent worker holds
hundreds of streams, and in-memory state such as the response store stays consistent), worker
timeouts that never kill a healthy long stream (the gevent worker heartbeats from its own
greenlet, so only a worker whose event loop is blocked for `timeout` seconds is killed), a
graceful shutdown that lets in-flight streams finish, and room for many open connections.

Must stay import-light — stdlib only. It is imported in gunicorn's master process, before the
gevent worker monkey-patches the standard library; importing Flask, requests or ssl here would
defeat that. The app itself is imported by each worker (`preload_app` stays off).
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any

# key= is the name of the client (or admin) key the request presented — never the key itself.
ACCESS_LOG_FORMAT = ('%(h)s "%(r)s" %(s)s %(B)s %(M)sms key=%({llm_proxy.client_key}e)s rid=%({x-request-id}o)s '
                     'ua="%(a)s"')


def _raise_fd_limit(worker: Any) -> None:
    """Each stream holds two sockets; the common soft limit of 1024 would cap us near 500."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            worker.log.warning("could not raise the open-file limit above %d", soft)


def _write_json_http_error(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's answer to a request it cannot parse (a bad header line, a duplicate Host, an
    oversized request line), as JSON instead of its HTML page. The path is unknown at that point,
    so the body carries both clients' fields: OpenAI SDKs read `error.message`, Anthropic SDKs
    `type` and `error.type`."""
    from gunicorn import util

    detail = f"{reason}: {mesg}" if mesg else reason
    body = json.dumps({"type": "error", "error": {
        "type": "invalid_request_error", "message": f"The HTTP request could not be parsed ({detail}).",
        "param": None, "code": "bad_http_request"}}).encode()
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
    util.write_nonblock(sock, head + body)


def _prepare_worker(worker: Any) -> None:
    _raise_fd_limit(worker)
    from gunicorn import util

    util.write_error = _write_json_http_error  # the base worker calls util.write_error by module lookup


def _check_config(server: Any) -> None:
    """Before any worker starts: an invalid config stops gunicorn with status 2 and one line naming
    the key and the problem, as `llm-proxy serve` does — not a traceback from every booting worker."""
    from proxy.config import ConfigError, load  # import-light: stdlib and PyYAML
    from proxy.protocols import registry  # the codecs: pure Python, no Flask, requests or gevent

    path = os.environ.get("LLM_PROXY_CONFIG")
    try:
        if not path:
            raise ConfigError("", "set LLM_PROXY_CONFIG to the path of the YAML config file")
        registry.resolve(load(path))
    except ConfigError as exc:
        print(f"llm-proxy: config error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)


def _flush_pool_state(server: Any, worker: Any) -> None:
    """A worker is exiting (SIGTERM, restart): write its pool changes, counters and usage to the store."""
    from proxy.ops.usage_writer import flush_all
    from proxy.upstream.keeper import stop_all  # in the worker, where the app (and gevent) are loaded

    stop_all()
    flush_all()  # usage still queued (normally none: each request's is written before it ends)


def settings(bind: str | None = None, workers: int | None = None) -> dict[str, Any]:
    env = os.environ
    return {
        "bind": [bind or env.get("LLM_PROXY_BIND", "127.0.0.1:8080")],
        "workers": workers or int(env.get("LLM_PROXY_WORKERS", "1")),
        "worker_class": "proxy.serving.worker.ProxyGeventWorker",
        "worker_connections": int(env.get("LLM_PROXY_WORKER_CONNECTIONS", "4096")),
        "timeout": int(env.get("LLM_PROXY_WORKER_TIMEOUT", "60")),
        "graceful_timeout": int(env.get("LLM_PROXY_GRACEFUL_TIMEOUT", "60")),
        "keepalive": int(env.get("LLM_PROXY_HTTP_KEEPALIVE", "5")),
        "preload_app": False,
        # "off" disables the access log entirely; /dev/null would still format every line.
        "accesslog": None if env.get("LLM_PROXY_ACCESS_LOG") == "off" else env.get("LLM_PROXY_ACCESS_LOG", "-"),
        "access_log_format": ACCESS_LOG_FORMAT,
        "logger_class": "proxy.serving.access_log.ProxyLogger",
        "errorlog": "-",
        "loglevel": env.get("LLM_PROXY_GUNICORN_LOG_LEVEL", "info"),
        "on_starting": _check_config,
        "post_worker_init": _prepare_worker,
        "worker_exit": _flush_pool_state,
    }
