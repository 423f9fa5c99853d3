"""`/admin/usage` and `/admin/requests` — who used what, and the last requests. Admin keys only, as
every `/admin/` path (proxy.blueprints.http).

  GET /admin/usage?since=&until=&group_by=client_key,model,upstream,account&bucket=&format=json|csv
      {"since", "until", "group_by", "bucket", "rows": [{<group values>, "requests", "errors",
      "input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens", "reasoning_tokens",
      "cost_usd", "cost_unknown_requests", "cache_saved_usd", "cache_hit_rate", "avg_first_byte_ms",
      "avg_duration_ms"}], "totals": {…}} — or the rows as CSV with a header line
      (parameters and their rules: proxy/ops/usage_query.py)
  GET /admin/requests?limit=100&key=&model=&status=&since=&until=&has_body=1
      {"data": [<the last requests this host finished, newest first: no bodies, no keys; each with
      "has_body", whether the request log keeps its bodies (GET /admin/requests/{id})>]}
      (filters: proxy/blueprints/request_log.py)

Figures are totals over the host's workers and survive restarts (proxy/ops/usage_writer.py says
why they are exact); what this worker still has queued is written before it answers.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Response, jsonify, request

from proxy.blueprints.request_log import parse_listing, request_log_has, request_log_totals
from proxy.blueprints.state import app_state
from proxy.errors import ProxyError
from proxy.ops.recent import entry_json
from proxy.ops.usage_query import answer_csv, answer_json, parse_query
from proxy.ops.usage_store import RECENT_CAP
from proxy.ops.usage_writer import UsageWriter
from proxy.upstream.keeper import call_store

bp = Blueprint("usage", __name__)


def _writer() -> UsageWriter:
    writer = app_state().usage
    if writer is None:
        raise ProxyError(404, f"{request.path} is off: usage accounting is disabled in the proxy's config "
                              "(usage.enabled: false).", "not_found")
    writer.flush()
    return writer


@bp.get("/admin/usage")
def usage() -> Response:
    query, answer_format = parse_query(request.args, time.time())
    writer = _writer()
    answer = call_store(writer.store, lambda: writer.store.query(query))
    if answer_format == "csv":
        return Response(answer_csv(query, answer), mimetype="text/csv",
                        headers={"Content-Disposition": 'inline; filename="usage.csv"'})
    return jsonify(answer_json(query, answer))


@bp.get("/admin/requests")
def recent_requests() -> Response:
    """The last requests, newest first, filtered; each says whether the request log has its bodies."""
    listing = parse_listing(request.args)
    writer = _writer()
    entries = call_store(writer.store, lambda: writer.store.recent(RECENT_CAP if listing.filtered else listing.limit))
    chosen = [e for e in entries if listing.matches(e)]
    logged = request_log_has([e.request_id for e in chosen]) if chosen else set()
    if listing.has_body:
        chosen = [e for e in chosen if e.request_id in logged]
    answer: dict[str, Any] = {"data": [{**entry_json(e), "has_body": e.request_id in logged}
                                       for e in chosen[:listing.limit]]}
    totals = request_log_totals()
    if totals is not None:
        answer["request_log"] = totals
    return jsonify(answer)
