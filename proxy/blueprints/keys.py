"""`GET /admin/keys` — the client keys and what each may still use. Admin keys only, as every
`/admin/` path (proxy.blueprints.http).

  GET /admin/keys
      {"data": [{"name", "disabled", "models": [glob…] | null, "limits": {<limit>: value} | null,
                 "budget": {<limit>: {"limit", "used", "remaining", "resets_in"}} | null}]}

`budget` is the shared figures now (every worker, and every host with the Redis backend): for
`requests_per_minute` / `tokens_per_minute` what the last minute used and in how many seconds it is
all back, for `tokens_per_day` / `tokens_per_month` what this UTC day or month used and when it
resets, for `max_concurrent` the requests in flight. Never a key: names only.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from proxy.blueprints.state import app_state

bp = Blueprint("keys", __name__)


@bp.get("/admin/keys")
def keys() -> Response:
    state = app_state()
    rows: list[dict[str, Any]] = []
    for entry in state.config.client_keys:
        limits = entry.limits
        rows.append({
            "name": entry.name, "disabled": entry.disabled,
            "models": list(entry.models) if entry.models is not None else None,
            "limits": dict(limits.items()) if limits is not None else None,
            "budget": state.limiter.status(entry),
        })
    return jsonify({"data": rows})
