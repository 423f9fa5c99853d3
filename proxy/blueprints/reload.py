"""`POST /admin/reload` and `GET /admin/config` — the config reload, asked for over HTTP, and which
config this worker serves. Admin keys only, like every `/admin/` endpoint.

`POST /admin/reload` checks the file in the worker that gets the request: a file that would be
refused answers 400 with the problem, naming the key (`upstreams[0].base_url: …`), and nothing
changes. Otherwise every worker reloads, as on SIGHUP, and the answer says whether this one has
switched: 200 `{"reloaded": true, "generation", "source", "loaded_at"}`, or 202 with
`"reloaded": false` if it had not within a few seconds. The reload itself is the serving layer's
(`AppState.reloader`, proxy.serving.reconfigure); this module only speaks HTTP.

`GET /admin/config` → `{"source", "loaded_at", "generation", "worker"}`: the file, when this
worker loaded it (ISO 8601, UTC), its generation (1 at start, one more per reload the host
accepted) and the worker's pid — with several workers, each answers for itself.
"""

from __future__ import annotations

import os

from flask import Blueprint, Response, jsonify

from proxy.blueprints.audit_trail import audit
from proxy.blueprints.state import app_state
from proxy.config import ConfigError
from proxy.errors import ProxyError
from proxy.logs import iso_time

bp = Blueprint("reload", __name__)


@bp.post("/admin/reload")
def reload() -> Response:
    try:
        outcome = app_state().reloader.request()
    except ConfigError as exc:
        raise ProxyError(400, f"The config was not reloaded: {exc}", "invalid_request",
                         code="invalid_config") from None
    resp = jsonify({**outcome, "loaded_at": iso_time(outcome["loaded_at"])})
    resp.status_code = 200 if outcome["reloaded"] else 202
    # the master records the reload itself (actor config-reload); this entry says which admin asked
    audit("config.reload.request", f"config:{app_state().config_source or '-'}", None,
          {"generation": outcome.get("generation"), "reloaded": outcome.get("reloaded")})
    return resp


@bp.get("/admin/config")
def config() -> Response:
    state = app_state()
    return jsonify({"source": state.config_source, "loaded_at": iso_time(state.config_loaded_at),
                    "generation": state.config_generation, "worker": os.getpid()})
