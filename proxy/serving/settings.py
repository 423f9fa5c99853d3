"""Gunicorn settings, shared by the packaged gunicorn config (`proxy.serving.gunicorn_conf`, which
the repository's `gunicorn.conf.py` imports) and by `llm-proxy serve` / `llm-proxy demo`.

Owns how the service runs: gevent workers (one by default — a single gevent worker holds
hundreds of streams, and in-memory state such as the response store stays consistent), worker
timeouts that never kill a healthy long stream (the gevent worker heartbeats from its own
greenlet, so only a worker whose event loop is blocked for `timeout` seconds is killed), a
graceful shutdown that lets in-flight streams finish, and room for many open connections. What
the master does for the proxy — checks before any worker starts, the config reload on SIGHUP, the
control socket, the startup summary — is `proxy.serving.master`'s; its hooks are wired here.

Must stay import-light — stdlib only. It is imported in gunicorn's master process, before the
gevent worker monkey-patches the standard library; importing Flask, requests or ssl here would
defeat that. The app itself is imported by each worker (`preload_app` stays off).
"""

from __future__ import annotations

import json
import os
import resource
from typing import Any

from proxy.serving import master
from proxy.serving.observability import with_metrics_and_log_format

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


def _hold_reloads(server: Any, worker: Any) -> None:
    """In a worker just forked: a config reload signalled now is kept for later (proxy.serving.worker)."""
    hold = getattr(worker, "hold_reloads", None)
    if hold is not None:
        hold(server)


def _flush_pool_state(server: Any, worker: Any) -> None:
    """A worker is exiting (SIGTERM, restart): write its pool changes, counters, usage, the
    charges of its finished requests' budgets and when its keys were last used to the store."""
    from proxy.budgets.guard import flush_all as charge_all
    from proxy.keys.directory import flush_all as note_keys_used
    from proxy.ops.tracing import flush_all as send_spans
    from proxy.ops.usage_writer import flush_all
    from proxy.upstream.keeper import stop_all  # in the worker, where the app (and gevent) are loaded

    stop_all()
    flush_all()  # usage still queued (normally none: each request's is written before it ends)
    send_spans()  # spans and metrics the exporters still hold (tracing: none when it is off)
    charge_all()  # budget charges queued for the next admission (proxy/budgets/guard.py)
    note_keys_used()  # when keys were last used, kept for the next batch (proxy/keys/directory.py)


def _tls_context(config: Any, default_ssl_context_factory: Any) -> Any:
    """gunicorn's TLS context (certfile, keyfile), wrapping sockets without a handshake on accept.
    gevent's server would otherwise shake hands before gunicorn's worker sees the connection, and a
    failed handshake — plain http to the https port, a scanner, a client that distrusts the
    certificate — would print gevent's traceback each time. gunicorn's worker then shakes hands
    itself (its do_handshake_on_connect is off) and treats a failure as the client's error: a debug
    line, the connection closed."""
    context = default_ssl_context_factory()
    wrap = context.wrap_socket

    def wrap_socket(sock: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["do_handshake_on_connect"] = False
        return wrap(sock, *args, **kwargs)

    context.wrap_socket = wrap_socket
    return context


def _server_section() -> dict[str, Any]:
    """gunicorn's settings from the config's `server:` section (proxy/config/server.py): TLS on the
    socket, and the peers whose X-Forwarded-Proto it believes. Without a readable config, nothing:
    the master's own check (on_starting) then says what is wrong with it."""
    from proxy.config import ConfigError, load  # import-light: stdlib and PyYAML

    path = os.environ.get("LLM_PROXY_CONFIG")
    if not path:
        return {}
    try:
        server = load(path).server
    except ConfigError:
        return {}
    options: dict[str, Any] = {"forwarded_allow_ips": ",".join(server.forwarded_allow_ips)}  # gunicorn: a string
    if server.tls is not None:
        options.update(certfile=server.tls.certfile, keyfile=server.tls.keyfile, ssl_context=_tls_context)
    return options


def settings(bind: str | None = None, workers: int | None = None) -> dict[str, Any]:
    env = os.environ
    return with_metrics_and_log_format({
        **_server_section(),
        "bind": [bind or env.get("LLM_PROXY_BIND", "127.0.0.1:8080")],
        # 0 is refused when gunicorn starts (proxy.serving.master), not taken for "unset".
        "workers": workers if workers is not None else int(env.get("LLM_PROXY_WORKERS", "1")),
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
        "on_starting": master.on_starting,
        "when_ready": master.when_ready,
        "post_fork": _hold_reloads,
        "post_worker_init": _prepare_worker,
        "worker_exit": _flush_pool_state,
    })
