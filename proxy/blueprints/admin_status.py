"""`GET /admin/status`: the instance at a glance, for the status page and for scripts.

  {"open_streams": n, "workers": n, "version": "…", "config": "/abs/path.yaml", "reloaded_at": null}

`open_streams` and `workers` are summed over the instance's workers alive now (the live gauges of
proxy/ops/metrics.py, which every worker writes and the master clears for a worker that died);
`reloaded_at` is when this worker switched to the config it serves (ISO 8601 UTC), null until a
reload (proxy.serving.reconfigure). Needs an admin key, like all
of /admin/.
"""

from __future__ import annotations

import os

from flask import Blueprint, Response, jsonify

from proxy import __version__
from proxy.blueprints.state import app_state
from proxy.logs import iso_time

bp = Blueprint("admin_status", __name__)


@bp.get("/admin/status")
def status() -> Response:
    state = app_state()
    source = state.config.source
    return jsonify({
        "open_streams": state.live.open_streams(),
        "workers": state.live.worker_count(),
        "version": __version__,
        "config": None if source == "<memory>" else os.path.abspath(source),
        "reloaded_at": iso_time(state.config_loaded_at) if state.config_generation > 1 else None,
    })
