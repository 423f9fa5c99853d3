"""The key API: client keys issued, changed, rotated, disabled and revoked at runtime, and the audit
trail of every such change. Admin keys only, as every `/admin/` path (proxy.blueprints.http).

  POST   /admin/keys                {name, models?, limits?, budget?, expires_at?, metadata?}
         → 201 {"key": <view>, "secret": "sk-…"}   (the secret is shown this once)
  GET    /admin/keys/<name>         → <view>
  PATCH  /admin/keys/<name>         {models?, limits?, budget?, expires_at?, metadata?, disabled?} → <view>
                                    (a key from the config file: `disabled` only)
  POST   /admin/keys/<name>/rotate  {grace_seconds} → {"key": <view>, "secret": "sk-…"}
  DELETE /admin/keys/<name>         → {"name", "revoked": true}   (runtime keys; disable a config key)
  GET    /admin/audit?since&until&actor&target&limit&format=csv → {"data": [entry…]}
  GET    /admin/whoami              → {"name", "role"}
  GET|POST /admin/key-groups, PATCH|DELETE /admin/key-groups/<name>   {name, keys, budget?}
  GET|POST /admin/admin-keys, DELETE /admin/admin-keys/<name>         {name, role} → its secret, once

`Idempotency-Key` on create and rotate returns the first answer again for an hour. A key's view is
proxy.keys.service's: never a secret or digest. `GET /admin/keys` (the list) is
proxy/blueprints/keys.py. Each change is visible at once in this worker and within a second in every
other worker and host (proxy/keys/directory.py).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from flask import Blueprint, Response, g, jsonify, request

from proxy.blueprints.state import AppState, app_state
from proxy.errors import ProxyError
from proxy.keys.admins import admin_views, create_admin, delete_admin
from proxy.keys.directory import KeyDirectory
from proxy.keys.groups import create_group, delete_group, group_view, update_group
from proxy.keys.model import AuditEntry
from proxy.keys.service import Context, KeyService, iso
from proxy.ops.usage_query import parse_time
from proxy.upstream.keeper import call_store

bp = Blueprint("key_admin", __name__)


def _service(state: AppState) -> tuple[KeyService, KeyDirectory]:
    directory = state.keys
    if directory is None:
        raise ProxyError(503, "Runtime keys are not available in this process.", "unavailable")
    config = state.config
    taken = (*(k.name for k in config.client_keys), *(k.name for k in config.admin_keys),
             *(g.name for g in config.key_groups))
    return KeyService(directory.store, directory.pepper, config.keys.prefix, config.client_keys, taken,
                      group_names=tuple(g.name for g in config.key_groups)), directory


def _context() -> Context:
    return Context(actor=getattr(g, "client_key_name", "admin"), request_id=getattr(g, "request_id", None),
                   client=request.remote_addr)


def _body() -> Any:
    if not request.data:
        return {}
    try:
        return json.loads(request.data)
    except ValueError:
        raise ProxyError(400, "The body is not valid JSON.", "invalid_request") from None


def _run(directory: KeyDirectory, fn: Any) -> Any:
    """A service call, on a thread when the store blocks; then this worker's directory refreshed,
    so the caller can use what it changed at once."""
    result = call_store(directory.store, fn)
    directory.refresh()
    return result


@bp.post("/admin/keys")
def create() -> tuple[Response, int]:
    service, directory = _service(app_state())
    body, ctx, key = _body(), _context(), request.headers.get("Idempotency-Key")
    status, answer = _run(directory, lambda: service.create(ctx, body, key))
    return jsonify(answer), status


@bp.get("/admin/keys/<name>")
def one(name: str) -> Response:
    service, directory = _service(app_state())
    return jsonify(call_store(directory.store, lambda: service.view(name)))


@bp.patch("/admin/keys/<name>")
def update(name: str) -> Response:
    service, directory = _service(app_state())
    body, ctx = _body(), _context()
    return jsonify(_run(directory, lambda: service.update(ctx, name, body)))


@bp.post("/admin/keys/<name>/rotate")
def rotate(name: str) -> tuple[Response, int]:
    service, directory = _service(app_state())
    body, ctx, key = _body(), _context(), request.headers.get("Idempotency-Key")
    status, answer = _run(directory, lambda: service.rotate(ctx, name, body, key))
    return jsonify(answer), status


@bp.delete("/admin/keys/<name>")
def revoke(name: str) -> Response:
    service, directory = _service(app_state())
    ctx = _context()
    return jsonify(_run(directory, lambda: service.revoke(ctx, name)))


@bp.get("/admin/key-groups")
def groups() -> Response:
    state = app_state()
    _, directory = _service(state)
    snapshot = directory.snapshot
    members: dict[str, list[str]] = {}
    for key in snapshot.keys.values():
        for group in key.groups:
            members.setdefault(group, []).append(key.name)
    shown = [group_view(g, "config", tuple(members.get(g.name, ()))) for g in state.config.key_groups]
    shown += [group_view(g, "runtime", tuple(members.get(n, ()))) for n, g in sorted(snapshot.groups.items())]
    return jsonify({"data": shown})


@bp.post("/admin/key-groups")
def create_key_group() -> tuple[Response, int]:
    return _made(create_group)


@bp.patch("/admin/key-groups/<name>")
def update_key_group(name: str) -> Response:
    service, directory = _service(app_state())
    body, ctx = _body(), _context()
    return jsonify(_run(directory, lambda: update_group(service, ctx, name, body)))


@bp.delete("/admin/key-groups/<name>")
def delete_key_group(name: str) -> Response:
    service, directory = _service(app_state())
    ctx = _context()
    return jsonify(_run(directory, lambda: delete_group(service, ctx, name)))


@bp.get("/admin/admin-keys")
def admin_keys() -> Response:
    state = app_state()
    service, directory = _service(state)
    return jsonify({"data": call_store(directory.store, lambda: admin_views(service, state.config.admin_keys))})


@bp.post("/admin/admin-keys")
def create_admin_key() -> tuple[Response, int]:
    return _made(create_admin)


def _made(make: Any) -> tuple[Response, int]:
    """201 and what `make(service, context, body)` made."""
    service, directory = _service(app_state())
    body, ctx = _body(), _context()
    return jsonify(_run(directory, lambda: make(service, ctx, body))), 201


@bp.delete("/admin/admin-keys/<name>")
def delete_admin_key(name: str) -> Response:
    state = app_state()
    service, directory = _service(state)
    ctx = _context()
    return jsonify(_run(directory, lambda: delete_admin(service, ctx, name, state.config.admin_keys)))


@bp.get("/admin/whoami")
def whoami() -> Response:
    entry = getattr(g, "client_key", None)
    return jsonify({"name": getattr(g, "client_key_name", None), "role": getattr(entry, "role", None) or "admin"})


@bp.get("/admin/audit")
def audit() -> Response:
    _, directory = _service(app_state())
    args = request.args
    since, until = _time(args.get("since"), "since"), _time(args.get("until"), "until")
    limit = args.get("limit", "1000")
    if not limit.isdigit() or not 1 <= int(limit) <= 10000:
        raise ProxyError(400, "limit: a number of entries from 1 to 10000.", "invalid_request", param="limit")
    entries = call_store(directory.store, lambda: directory.store.audit(since, until, args.get("actor") or None,
                                                                       args.get("target") or None, int(limit)))
    rows = [_entry(e) for e in entries]
    if args.get("format") == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        names = ["at", "actor", "action", "target", "before", "after", "request_id", "client"]
        writer.writerow(names)
        for row in rows:
            writer.writerow([json.dumps(row[n]) if isinstance(row[n], dict) else row[n] for n in names])
        return Response(out.getvalue(), mimetype="text/csv")
    return jsonify({"data": rows})


def _entry(e: AuditEntry) -> dict[str, Any]:
    return {"at": iso(e.at), "actor": e.actor, "action": e.action, "target": e.target, "before": e.before,
            "after": e.after, "request_id": e.request_id, "client": e.client}


def _time(value: str | None, name: str) -> float | None:
    return parse_time(value, name) if value else None  # as /admin/usage reads its times
