"""`GET /admin/keys` — the client keys and what each may still use, and the key groups' budgets.
Admin keys only, as every `/admin/` path (proxy.blueprints.http).

  GET /admin/keys
      {"data": [{"name", "disabled", "models": [glob…] | null, "limits": {<limit>: value} | null,
                 "budget": {<limit>: {"limit", "used", "remaining", "resets_in"}} | null,
                 "groups": [<group name>…],
                 "usd_budget": {<window>: {"limit_usd", "spent_usd", "reserved_usd", "remaining_usd",
                                           "resets_in"}} | null}],
       "groups": [{"name", "keys": [<key name>…], "usd_budget": {…as above…} | null}]}

`budget` is the token limits' shared figures now (every worker, and every host with the Redis
backend): for `requests_per_minute` / `tokens_per_minute` what the last minute used and in how many
seconds it is all back, for `tokens_per_day` / `tokens_per_month` what this UTC day or month used
and when it resets, for `max_concurrent` the requests in flight. `usd_budget` is the USD budget
beside it (proxy.budgets): per window (`usd_per_day`, `usd_per_month`, `usd_total`) what the
current UTC period spent (settled costs), what requests in flight hold (their worst case), what
remains, and the seconds until it resets (null for `usd_total`). While the budget store does not
answer, `usd_budget` is `{"error": "…"}`. Keys made at runtime are listed after the file's, and every
row carries the key's view (proxy.keys.service: origin, hint, created/last used/expires, metadata,
rotating_until). Never a key or its digest.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from proxy.blueprints.state import app_state
from proxy.budgets.windows import GROUP, KEY, Subject
from proxy.keys.service import config_view, runtime_view

bp = Blueprint("keys", __name__)


@bp.get("/admin/keys")
def keys() -> Response:
    state = app_state()
    directory = state.keys
    config = directory.effective(state.config) if directory is not None else state.config  # runtime groups too
    snapshot = directory.snapshot if directory is not None else None
    runtime = [e for n in sorted(snapshot.keys) if (e := directory.entry(n)) is not None] \
        if directory is not None and snapshot is not None else []
    entries = [*config.client_keys, *runtime]
    own = [Subject(KEY, e.name, e.budget) for e in entries if e.budget is not None]
    teams = [Subject(GROUP, g.name, g.budget) for g in config.key_groups if g.budget is not None]
    try:
        usd: dict[str, Any] = state.budgets.figures(config, own + teams)
        unavailable = None
    except Exception as exc:
        usd, unavailable = {}, {"error": f"the budget store does not answer ({type(exc).__name__})"}
    rows: list[dict[str, Any]] = []
    for entry in entries:
        limits = entry.limits
        stored = snapshot.keys.get(entry.name) if snapshot is not None else None
        last_used = snapshot.last_used.get(entry.name) if snapshot is not None else None
        view = runtime_view(stored, last_used) if stored is not None else config_view(
            entry, snapshot.overlays.get(entry.name) if snapshot is not None else None, last_used)
        rows.append({
            **view,
            "name": entry.name, "disabled": view["disabled"],
            "models": list(entry.models) if entry.models is not None else None,
            "limits": dict(limits.items()) if limits is not None else None,
            "budget": state.limiter.status(entry),
            "groups": [g.name for g in config.key_groups if entry.name in g.keys],
            "usd_budget": None if entry.budget is None else unavailable or usd.get(f"{KEY}:{entry.name}"),
        })
    groups = [{"name": g.name, "keys": list(g.keys),
               "usd_budget": None if g.budget is None else unavailable or usd.get(f"{GROUP}:{g.name}")}
              for g in config.key_groups]
    return jsonify({"data": rows, "groups": groups})
