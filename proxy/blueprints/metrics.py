"""`GET /metrics`: the Prometheus exposition of this instance, every worker's counts summed.

Needs an admin key unless the config says `metrics.public: true` (proxy.blueprints.http decides);
answers 404 when `metrics.enabled: false`. Account states are read from the pool after a sync
with the shared store, so a change another worker made is seen at once. What is counted and
how: proxy/ops/metrics.py.
"""

from __future__ import annotations

from flask import Blueprint, Response, request

from proxy.blueprints.state import app_state
from proxy.errors import ProxyError
from proxy.ops.metrics import render

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def metrics() -> Response:
    state = app_state()
    if state.metrics is None:
        raise ProxyError(404, "Metrics are turned off in this proxy's config (metrics.enabled: false).", "not_found")
    state.keeper.sync()
    body, content_type = render(state.live, state.pools, request.headers.get("Accept"), state.store_health)
    return Response(body, status=200, content_type=content_type)
