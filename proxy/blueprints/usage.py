"""`/admin/usage` and `/admin/requests` — who used what, and the last requests. Admin keys only, as
every `/admin/` path (proxy.blueprints.http).

  GET /admin/usage?since=&until=&group_by=client_key,model,upstream,account&bucket=&format=json|csv
      {"since", "until", "group_by", "bucket", "rows": [{<group values>, "requests", "errors",
      "input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens", "reasoning_tokens",
      "cost_usd", "cost_unknown_requests", "cache_saved_usd", "cache_hit_rate", "avg_first_byte_ms",
      "avg_duration_ms"}], "totals": {…}} — or the rows as CSV with a header line
      (parameters and their rules: proxy/ops/usage_query.py)
  GET /admin/requests?limit=100
      {"data": [<the last requests this host finished, newest first: no bodies, no keys>]}

Figures are totals over the host's workers and survive restarts (proxy/ops/usage_writer.py says
why they are exact); what this worker still has queued is written before it answers.
"""

from __future__ import annotations

import time

from flask import Blueprint, Response, jsonify, request

from proxy.blueprints.state import app_state
from proxy.errors import ProxyError, invalid
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
    for name in request.args:
        if name != "limit":
            raise invalid(name, "unknown parameter; /admin/requests takes limit")
    raw = request.args.get("limit", "100")
    if not raw.isdigit() or not 1 <= int(raw) <= RECENT_CAP:
        raise invalid("limit", f"must be a whole number from 1 to {RECENT_CAP} (got {raw!r})")
    writer = _writer()
    return jsonify({"data": [entry_json(e) for e in call_store(writer.store, lambda: writer.store.recent(int(raw)))]})
