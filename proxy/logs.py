"""Logging: one format for the whole service, with the request id on every line.

Owns the request-id context variable (set by the blueprints' before-request hook, read by every
log line written while that request is handled, streaming included), the handler setup, and the
two formats: `text` (the default, one readable line) and `json` (config `logging.format: json`:
one JSON object per line, with an ISO 8601 UTC `time` and a `msg`). A line that describes an event
— an attempt, an access — is logged with `extra={"event": NAME, "fields": {...}}`: the text format
prints its message as always, the JSON format prints the event and its fields, so whoever writes a
line states its facts once and never picks a format.
Never log request headers or bodies here: they carry client and upstream credentials.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Any

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

FORMAT = "%(asctime)s %(levelname)s [%(request_id)s] %(name)s: %(message)s"


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def iso_time(seconds: float) -> str:
    """`2026-01-31T12:00:00.123Z`: UTC, milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: `time`, `level`, `logger`, `request_id` (when a request is being
    handled), then either `event` and the event's fields, or `msg` (the text of any other line);
    a traceback goes in `exc`, escaped like every other value so it cannot break the line apart."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": iso_time(record.created), "level": record.levelname.lower(),
                               "logger": record.name}
        rid = getattr(record, "request_id", None)
        if rid and rid != "-":
            out["request_id"] = rid
        event = getattr(record, "event", None)
        if event:
            out["event"] = out["msg"] = event
            out.update(getattr(record, "fields", None) or {})
        else:
            out["msg"] = record.getMessage()
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str)


def formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else logging.Formatter(FORMAT)


def configure(level: str, fmt: str = "text") -> None:
    """Attach one stderr handler to the `proxy` logger (idempotent across create_app calls; the
    format follows the latest call). In JSON mode the rest of the process — libraries' warnings,
    Python's own warnings — writes JSON lines too, so that every line of the log parses."""
    logger = logging.getLogger("proxy")
    logger.setLevel(level.upper())
    logger.propagate = False
    ours: list[logging.Handler] = [h for h in logger.handlers if getattr(h, "_llm_proxy", False)]
    if not ours:
        stderr = logging.StreamHandler(sys.stderr)
        stderr.addFilter(_RequestIdFilter())
        stderr._llm_proxy = True  # type: ignore[attr-defined]
        logger.addHandler(stderr)
        ours = [stderr]
    for handler in ours:
        handler.setFormatter(formatter(fmt))
    if fmt == "json":
        root = logging.getLogger()
        if not any(getattr(h, "_llm_proxy", False) for h in root.handlers):
            warnings = logging.StreamHandler(sys.stderr)
            warnings.setLevel(logging.WARNING)
            warnings.setFormatter(JsonFormatter())
            warnings._llm_proxy = True  # type: ignore[attr-defined]
            root.addHandler(warnings)
        logging.captureWarnings(True)
