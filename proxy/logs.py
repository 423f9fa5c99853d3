"""Logging: one format for the whole service, with the request id on every line.

Owns the request-id context variable (set by the blueprints' before-request hook, read by every
log line written while that request is handled, streaming included) and the handler setup.
Never log request headers or bodies here: they carry client and upstream credentials.
"""

from __future__ import annotations

import contextvars
import logging
import sys

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

FORMAT = "%(asctime)s %(levelname)s [%(request_id)s] %(name)s: %(message)s"


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def configure(level: str) -> None:
    """Attach one stderr handler to the `proxy` logger (idempotent across create_app calls)."""
    logger = logging.getLogger("proxy")
    logger.setLevel(level.upper())
    logger.propagate = False
    if any(getattr(h, "_llm_proxy", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(_RequestIdFilter())
    handler._llm_proxy = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
