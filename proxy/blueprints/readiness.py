"""`GET /readyz` — whether this proxy can serve a request now: every upstream has an account in
rotation. No key needed, like `/healthz` (which says only that the process answers).

Answers 200 `{"ready": true, "upstreams": {name: {"active", "cooling", "disabled"}}}`, or 503 with
`"ready": false` and the same detail, for load balancers and orchestrators to route around a proxy
whose accounts are all out. Read from this worker's pools, in memory (kept in step with the other
workers' by the keeper, within about two seconds): no IO, so it stays cheap under probing.
An account in rotation whose outbound proxies are all cooling cannot serve either, and counts as
cooling; one busy at its `max_concurrency` counts as active. `"state"` says whether the shared state
store answers (`ok`, or `degraded` with `state_down_since` while Redis is away).
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from proxy.blueprints.state import app_state

bp = Blueprint("readiness", __name__)


@bp.get("/readyz")
def ready() -> Response:
    upstreams = {}
    state = app_state()
    for name, pool in state.pools.items():
        seen = pool.availability()
        cooling = seen.cooling + seen.proxies_cooling
        upstreams[name] = {"active": seen.total - cooling - seen.disabled, "cooling": cooling,
                           "disabled": seen.disabled}
    ready = all(counts["active"] > 0 for counts in upstreams.values())
    health = state.store_health
    # A shared store (Redis) that cannot be reached degrades the proxy but does not stop it: each
    # worker routes on its last known state, so this stays 200 while accounts are usable.
    resp = jsonify({"ready": ready, **health.public(), "upstreams": upstreams})
    resp.status_code = 200 if ready else 503
    return resp
