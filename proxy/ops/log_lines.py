"""The log lines written from the records: each attempt's line, and a request's part of its access line.

Owns how an attempt and a finished request read in the log. The attempt line is written here, from
the `AttemptRecord` the relay hands the hooks, once for both formats (proxy.logs): the text format
prints it exactly as it has always read (`attempt rid=… upstream=… account=… status=… class=…
action=… elapsed_ms=…`, under the `proxy.relay` logger), the JSON format prints the same facts as
fields, with who asked for which model. The access line itself is gunicorn's
(proxy/serving/access_log.py); in JSON mode it adds the request's record (`request_fields`), which
the completion endpoint leaves in the WSGI environ under `ENVIRON_KEY`. gunicorn writes its access
line before it closes the response body, and a stream's record closes with its body, so for a
stream the access line waits here (`when_done`) until the hooks hear that the request is done.
Must not import Flask, requests or gevent; never holds a key (records carry the key's name).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from proxy.ops.hooks import Hooks
from proxy.ops.records import AttemptRecord, RequestRecord

ENVIRON_KEY = "llm_proxy.record"  # where the completion endpoint leaves a request's record in the WSGI environ
ATTEMPT_TEXT = "attempt rid=%s upstream=%s account=%s status=%s class=%s action=%s elapsed_ms=%d%s"

log = logging.getLogger("proxy.relay")  # the attempt line has always been the relay's
# Access lines waiting for their request's record to close (a stream's closes just after), by record.
# One worker is one thread of greenlets, and the hooks run on the request's own greenlet.
_waiting: dict[int, Callable[[], None]] = {}


def when_done(record: RequestRecord, write: Callable[[], None]) -> None:
    """Call `write` once `record` is done: now if it is, else when the hooks are told it is."""
    if record.done:
        write()
    else:
        _waiting[id(record)] = write


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def request_fields(record: RequestRecord) -> dict[str, Any]:
    """What an access line says about a completion request, beyond HTTP: who asked for which model
    at which endpoint, where it went, how it ended, its timings and its tokens (null when the upstream
    reported none) — and, only when a fallback answered, the model that served (`served_model`)."""
    usage = record.usage
    fields = {
        "client_key": record.client_key, "client_protocol": record.client_protocol,
        "endpoint": record.endpoint or record.client_protocol, "model": record.model,
        "stream": record.stream, "upstream": record.upstream, "account": record.account,
        "upstream_model": record.upstream_model, "outcome": record.outcome, "attempts": record.attempts,
        "first_byte_ms": _ms(record.first_byte_s), "duration_ms": _ms(record.duration_s),
        "input_tokens": usage.input_tokens if usage else None,
        "output_tokens": usage.output_tokens if usage else None,
        "cached_tokens": usage.cache_read_tokens if usage else None,
        "reasoning_tokens": usage.reasoning_tokens if usage else None,
    }
    if record.served_model:
        fields["served_model"] = record.served_model
    return fields


class LogLines(Hooks):
    def attempt(self, record: AttemptRecord) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        dropped = record.dropped
        request = record.request
        fields: dict[str, Any] = {
            "request_id": record.request_id,
            "client_key": request.client_key if request else None,
            "client_protocol": request.client_protocol if request else None,
            "model": request.model if request else None,
            "upstream": record.upstream, "account": record.account,
            "upstream_model": record.upstream_model,
            "status": record.status, "class": record.klass, "action": record.action,
            "elapsed_ms": _ms(record.elapsed_s),
        }
        if dropped:
            fields["dropped"] = dropped
        log.info(ATTEMPT_TEXT, record.request_id, record.upstream, record.account,
                 "-" if record.status is None else record.status, record.klass, record.action,
                 record.elapsed_s * 1000,
                 " dropped=" + ",".join(f"{what}:{n}" for what, n in sorted(dropped.items())) if dropped else "",
                 extra={"event": "attempt", "fields": fields})

    def request_done(self, record: RequestRecord) -> None:
        write = _waiting.pop(id(record), None)
        if write is not None:
            write()
