"""The gunicorn access log line, formatted from only the fields its format names.

Owns gunicorn's `logger_class`. gunicorn's own logger builds, for every request, a dict of every
request header, response header and WSGI environ entry (and the formatted time) before applying
a format that reads six of them — 0.13 ms per request, a seventh of a non-streamed request's
CPU in the benchmark. Here the fields are computed when the format asks for them; any field
beyond the common ones falls back to gunicorn's full set, so a custom `access_log_format` keeps
working unchanged.

`JsonProxyLogger` is the logger class under `logging.format: json` (chosen by
proxy/serving/observability.py): gunicorn's own lines become JSON objects (proxy.logs.JsonFormatter),
and the access line is one too — HTTP fields, and for a completion request its record's fields
(proxy.ops.log_lines: client key name, model, upstream, account, outcome, timings, tokens).

Imported by gunicorn's master before any monkey-patching: stdlib, gunicorn and proxy.logs only (the
record's fields are read in the worker, where the app has been imported).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gunicorn import glogging

from proxy import logs
from proxy.errors import redact_query_key


class _Atoms(Mapping[str, Any]):
    """What `%(name)s` in the access-log format reads, with gunicorn's conventions: '-' for an
    absent field, `{header}i` / `{header}o` / `{variable}e` case-insensitive, double quotes in
    values escaped (a client-chosen User-Agent must not break the line's quoting)."""

    def __init__(self, logger: glogging.Logger, resp: Any, req: Any, environ: dict[str, Any],
                 request_time: Any) -> None:
        self._args = (logger, resp, req, environ, request_time)
        self._all: Mapping[str, Any] | None = None

    def __getitem__(self, key: str) -> Any:
        _, resp, req, environ, request_time = self._args
        field = _COMMON.get(key)
        if field is not None:
            value = field(resp, environ, request_time)
        elif key.endswith("}o") and key.startswith("{"):
            value = _header(resp.headers, key[1:-2])
        elif key.endswith("}i") and key.startswith("{"):
            value = _header(getattr(req, "headers", ()), key[1:-2])
        elif key.endswith("}e") and key.startswith("{"):  # the client key's name is one (proxy.blueprints.http)
            value = _environ(environ, key[1:-2])
        else:
            return self._everything()[key]
        return value.replace('"', '\\"') if isinstance(value, str) else value

    def _everything(self) -> Mapping[str, Any]:
        if self._all is None:
            logger = self._args[0]
            self._all = logger.atoms_wrapper_class(logger.atoms(*self._args[1:]))
        return self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._everything())

    def __len__(self) -> int:  # logging formats with a mapping only if it is non-empty
        return len(_COMMON)


def _header(headers: Any, name: str) -> str:
    name = name.lower()
    for key, value in headers:
        if key.lower() == name:
            return str(value)
    return "-"


def _environ(environ: dict[str, Any], name: str) -> Any:
    value = environ.get(name)
    if value is None:  # gunicorn's lookup is case-insensitive
        name = name.lower()
        value = next((v for k, v in environ.items() if k.lower() == name), "-")
    return value


def _status(resp: Any) -> str:
    status = resp.status
    return status.split(None, 1)[0] if isinstance(status, str) else str(status)


_COMMON: dict[str, Callable[[Any, dict[str, Any], Any], Any]] = {
    "h": lambda resp, env, t: env.get("REMOTE_ADDR", "-"),
    "r": lambda resp, env, t: f"{env['REQUEST_METHOD']} {env['RAW_URI']} {env['SERVER_PROTOCOL']}",
    "s": lambda resp, env, t: _status(resp),
    "B": lambda resp, env, t: getattr(resp, "sent", None),
    "M": lambda resp, env, t: t.seconds * 1000 + t.microseconds // 1000,
    "a": lambda resp, env, t: env.get("HTTP_USER_AGENT", "-"),
}


def without_key(environ: dict[str, Any]) -> dict[str, Any]:
    """The environ with a key sent in the query string (`?key=`, as Gemini clients may) blanked out of
    the URI and query the line shows: keys never reach a log line."""
    raw, query = environ.get("RAW_URI", ""), environ.get("QUERY_STRING", "")
    if "key=" not in raw.lower() and "key=" not in query.lower():
        return environ
    return {**environ, "RAW_URI": redact_query_key(raw, "REDACTED"),
            "QUERY_STRING": redact_query_key(query, "REDACTED")}


class ProxyLogger(glogging.Logger):
    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        environ = without_key(environ)
        try:
            self.access_log.info(self.cfg.access_log_format, _Atoms(self, resp, req, environ, request_time))
        except Exception:
            self.error(traceback.format_exc())


class JsonProxyLogger(ProxyLogger):
    """gunicorn's logger with every line a JSON object (`logging.format: json`)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in (*self.error_log.handlers, *self.access_log.handlers):
            handler.setFormatter(logs.JsonFormatter())
        # The master logs too before any worker exists (checking the config, say): in JSON as well.
        logs.configure("info", "json")

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        environ = without_key(environ)
        try:
            fields: dict[str, Any] = {
                "request_id": _header(resp.headers, "x-request-id"), "remote_addr": environ.get("REMOTE_ADDR"),
                "method": environ.get("REQUEST_METHOD"), "path": environ.get("RAW_URI"),
                "status": int(_status(resp)), "bytes": getattr(resp, "sent", None),
                "elapsed_ms": round(request_time.total_seconds() * 1000, 1),
                "user_agent": environ.get("HTTP_USER_AGENT"),
            }
            record = environ.get("llm_proxy.record")  # proxy.ops.log_lines.ENVIRON_KEY
            if record is None:
                self._write(fields, None)
                return
            from proxy.ops.log_lines import when_done  # in the worker: the app is loaded

            # A stream's record closes when gunicorn closes its body, just after this call.
            when_done(record, lambda: self._write(fields, record))
        except Exception:
            self.error(traceback.format_exc())

    def _write(self, fields: dict[str, Any], record: Any) -> None:
        if record is not None:
            from proxy.ops.log_lines import request_fields

            fields.update(request_fields(record))
        self.access_log.info("%s %s %s", fields["method"], fields["path"], fields["status"],
                             extra={"event": "access", "fields": fields})
