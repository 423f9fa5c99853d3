"""`/admin/` — see and steer the account pools. Needs a key from `admin_keys` (client keys are
refused); disabled when no admin key is configured.

  GET    /admin/accounts                          every upstream's accounts: state, reason, counters, last error,
                                                  and the overlay on the config file (below)
  POST   /admin/accounts/<upstream>               add an account {id, api_key, weight?, …} (persisted)
  DELETE /admin/accounts/<upstream>/<id>          remove it (persisted)
  POST   /admin/accounts/<upstream>/<id>/disable  {reason?}: take it out of rotation
  POST   /admin/accounts/<upstream>/<id>/enable   put it back

Keys are never shown — a masked suffix at most — and outbound proxies only as scheme://host:port,
each with its state (ok, or cooling until a time, with the reason and the consecutive failures).
Counters are totals over every worker (as of the last sync, at most a second old); `in_flight` and
`last_error` are this worker's. Changes reach the store before the answer, so every worker applies them within
about two seconds.

Accounts added or removed here are an overlay on the config file (proxy.pool.membership): each
account says where it comes from (`origin`: `config` or `runtime`), and each upstream lists the
file's accounts deleted here (`removed_at_runtime`) — they come back when the file is reloaded.
"""

from __future__ import annotations

import os
import time
from typing import Any

from flask import Blueprint, Response, jsonify, request

from proxy.blueprints.audit_trail import audit
from proxy.blueprints.http import json_body
from proxy.blueprints.state import AppState, app_state
from proxy.config import parse_account
from proxy.config.values import ConfigError
from proxy.errors import ProxyError
from proxy.pool.pool import AccountPool
from proxy.upstream.keeper import blocking

bp = Blueprint("admin", __name__)


def _state() -> AppState:
    return app_state()


def _pool(upstream: str) -> AccountPool:
    pool: AccountPool | None = _state().pools.get(upstream)
    if pool is None:
        raise ProxyError(404, f"No upstream named {upstream!r}; GET /admin/accounts lists them.", "not_found")
    return pool


def _account(pool: AccountPool, account_id: str) -> dict[str, Any]:
    state = pool.get(account_id)
    if state is None:
        raise ProxyError(404, f"Upstream {pool.upstream.name!r} has no account {account_id!r}.", "not_found")
    return pool.view(state, time.time())


@bp.get("/admin/accounts")
def list_accounts() -> Response:
    keeper = _state().keeper
    keeper.sync()
    totals = {(r.upstream, r.id): r for r in blocking(keeper.store.counters)}
    upstreams = []
    now = time.time()
    for name, pool in _state().pools.items():
        accounts = []
        added, removed = pool.overlay()
        for state in pool.states():
            row = pool.view(state, now)
            row["origin"] = "runtime" if state.id in added else "config"
            stored = totals.get((name, state.id))
            if stored is not None:  # totals over every worker
                row.update(requests=stored.requests, failures=stored.failures, tokens_in=stored.tokens_in,
                           tokens_out=stored.tokens_out, last_used=stored.last_used or None)
            accounts.append(row)
        upstreams.append({"name": name, "protocol": pool.upstream.protocol, "policy": pool.settings.policy,
                          "accounts": accounts, "removed_at_runtime": removed})
    return jsonify({"upstreams": upstreams, "worker": os.getpid()})


@bp.post("/admin/accounts/<upstream>")
def add_account(upstream: str) -> Response:
    pool = _pool(upstream)
    try:
        account = parse_account(json_body(), "account")
    except ConfigError as exc:
        raise ProxyError(400, str(exc), "invalid_request") from None
    if not pool.add(account):
        raise ProxyError(409, f"Upstream {upstream!r} already has an account {account.id!r}.", "invalid_request")
    _state().keeper.sync()
    added = _account(pool, account.id)
    audit("account.add", f"account:{upstream}/{account.id}", None, added)
    return _created(added)


def _created(body: dict[str, Any]) -> Response:
    resp = jsonify(body)
    resp.status_code = 201
    return resp


@bp.delete("/admin/accounts/<upstream>/<account_id>")
def remove_account(upstream: str, account_id: str) -> Response:
    pool = _pool(upstream)
    before = _account(pool, account_id)
    pool.remove(account_id)
    _state().keeper.sync()
    audit("account.remove", f"account:{upstream}/{account_id}", before, None)
    return jsonify({"upstream": upstream, "id": account_id, "removed": True})


@bp.post("/admin/accounts/<upstream>/<account_id>/<action>")
def change_account(upstream: str, account_id: str, action: str) -> Response:
    pool = _pool(upstream)
    before = _account(pool, account_id)
    if action == "disable":
        body = json_body() if request.content_length else {}
        pool.disable(account_id, f"admin: {body.get('reason') or 'disabled by an admin'}")
    elif action == "enable":
        pool.enable(account_id)
    else:
        raise ProxyError(404, f"Unknown action {action!r}: use enable or disable.", "not_found")
    _state().keeper.sync()
    after = _account(pool, account_id)
    audit(f"account.{action}", f"account:{upstream}/{account_id}", before, after)
    return jsonify(after)
