"""The request log's admin API: `GET /admin/requests/{id}`, and the filters of `GET /admin/requests`.

  GET /admin/requests/{id}
      the request's entry (its metadata as /admin/requests lists it, "has_body", and — when the
      request log keeps it — "logged_because", "client_request", "attempts", "client_response":
      proxy/ops/request_entry.py says what each holds); the bodies to `admin` keys only — a
      `viewer` gets every body as null and "bodies_withheld": true
  GET /admin/requests/{id}?part=client_request|upstream_request|upstream_response|client_response[&attempt=N]
      that body's bytes as kept, with its content type (an upstream part: attempt N's, else the last)
  GET /admin/requests?key=&model=&status=&since=&until=&has_body=1&limit=
      key: a key's name (globs allowed); model: as asked or as sent; status: 200, or 2xx / 4xx / 5xx;
      since / until: ISO 8601 or epoch seconds; has_body=1: only requests the log keeps

Owns these rules and reading the log's store for them (what this worker still has queued is
written first, so a request just finished is there). Admin keys only, as every `/admin/` path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from flask import Blueprint, Response, g, jsonify, request

from proxy.blueprints.state import app_state
from proxy.errors import ProxyError, invalid
from proxy.ops.recent import entry_json
from proxy.ops.request_entry import PARTS, detail_json, raw_part
from proxy.ops.usage_query import parse_time
from proxy.ops.usage_store import RECENT_CAP, RecentEntry
from proxy.upstream.keeper import call_store

bp = Blueprint("request_log", __name__)

LISTING_PARAMETERS = ("limit", "key", "model", "status", "since", "until", "has_body")
_STATUS = re.compile(r"^([1-5])xx$")
WRITE_WAIT = 5.0  # seconds a read waits for this worker's queued entries to be written


@dataclass(frozen=True)
class Listing:
    limit: int
    key: str | None = None
    model: str | None = None
    status: str | None = None
    since: float | None = None
    until: float | None = None
    has_body: bool = False

    @property
    def filtered(self) -> bool:
        return any(v is not None for v in (self.key, self.model, self.status, self.since, self.until)) or self.has_body

    def matches(self, entry: RecentEntry) -> bool:
        if self.key is not None and not fnmatchcase(entry.client_key or "", self.key):
            return False
        if self.model is not None and self.model not in (entry.model, entry.upstream_model):
            return False
        if self.status is not None:
            klass = _STATUS.match(self.status)
            if klass is not None and str(entry.status)[:1] != klass.group(1):
                return False
            if klass is None and str(entry.status) != self.status:
                return False
        if self.since is not None and entry.time < self.since:
            return False
        return not (self.until is not None and entry.time >= self.until)


def parse_listing(args: Mapping[str, str]) -> Listing:
    for name in args:
        if name not in LISTING_PARAMETERS:
            raise invalid(name, f"unknown parameter; /admin/requests takes {', '.join(LISTING_PARAMETERS)}")
    raw = args.get("limit", "100")
    if not raw.isdigit() or not 1 <= int(raw) <= RECENT_CAP:
        raise invalid("limit", f"must be a whole number from 1 to {RECENT_CAP} (got {raw!r})")
    status = args.get("status") or None
    if status is not None and not (status.isdigit() or _STATUS.match(status)):
        raise invalid("status", f"must be a status such as 200 or a class such as 4xx (got {status!r})")
    has_body = args.get("has_body", "")
    if has_body not in ("", "0", "1", "true", "false"):
        raise invalid("has_body", f"must be 1 or 0 (got {has_body!r})")
    since = parse_time(args["since"], "since") if args.get("since") else None
    until = parse_time(args["until"], "until") if args.get("until") else None
    if since is not None and until is not None and since >= until:
        raise invalid("since", "must be earlier than until")
    return Listing(int(raw), args.get("key") or None, args.get("model") or None, status, since, until,
                   has_body in ("1", "true"))


def request_log_has(request_ids: list[str]) -> set[str]:
    """Which of these requests the request log keeps (none when it is off)."""
    writer = app_state().request_log
    if writer is None:
        return set()
    writer.wait_idle(WRITE_WAIT)
    store = writer.store
    return call_store(store, lambda: store.having(request_ids))


def request_log_totals() -> dict[str, int] | None:
    """What the log holds — entries, bytes, and how many the size bound dropped (all hosts') — and
    what this worker dropped before they reached it (`dropped_queue`: the writer was behind;
    `failed`: the store failed); None when the log is off."""
    writer = app_state().request_log
    if writer is None:
        return None
    store = writer.store
    return {**call_store(store, store.totals), "dropped_queue": writer.dropped_queue, "failed": writer.failed}


@bp.get("/admin/requests/<request_id>")
def one_request(request_id: str) -> Response:
    part = request.args.get("part")
    if part is not None and part not in PARTS:
        raise invalid("part", f"must be one of {', '.join(PARTS)} (got {part!r})")
    attempt_arg = request.args.get("attempt")
    if attempt_arg is not None and not attempt_arg.isdigit():
        raise invalid("attempt", f"must be an attempt's number, 1 for the first (got {attempt_arg!r})")
    state = app_state()
    entry = None
    if state.request_log is not None:
        state.request_log.wait_idle(WRITE_WAIT)
        store = state.request_log.store
        entry = call_store(store, lambda: store.get(request_id))
    bodies = getattr(g, "client_key", None) is not None and g.client_key.role != "viewer"
    if part is not None:
        if entry is None:
            raise ProxyError(404, f"The request log has no request {request_id!r}.", "not_found")
        if not bodies:
            raise ProxyError(403, "Bodies are shown to admin keys only; this key is a viewer.", "permission")
        found = raw_part(entry, part, int(attempt_arg) if attempt_arg else None)
        if found is None:
            raise ProxyError(404, f"The request {request_id!r} has no {part} kept"
                                  + (f" for attempt {attempt_arg}" if attempt_arg else "") + ".", "not_found")
        data, content_type = found
        return Response(data, content_type=content_type)
    if entry is not None:
        return jsonify(detail_json(entry, with_bodies=bodies))
    listed = _recent(request_id)
    if listed is None:
        where = "" if state.request_log is not None else " (the request log is off: request_log.enabled)"
        raise ProxyError(404, f"No request {request_id!r} among the recent requests or in the request log{where}.",
                         "not_found")
    return jsonify({**entry_json(listed), "has_body": False})


def _recent(request_id: str) -> RecentEntry | None:
    writer = app_state().usage
    if writer is None:
        return None
    writer.flush()
    entries = call_store(writer.store, lambda: writer.store.recent(RECENT_CAP))
    return next((e for e in entries if e.request_id == request_id), None)
