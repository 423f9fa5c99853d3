"""The key store's values as JSON-ready dicts and back: the one translation the state file's store
(proxy/keys/sqlite_store.py, JSON text in columns) and Redis's (proxy/keys/redis_store.py, one JSON
document per value) share, so both read back exactly what the in-memory store keeps.

Owns the field names of the stored documents; decides nothing. Pure.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from proxy.keys.model import AuditEntry, Idempotent, RuntimeAdmin, RuntimeGroup, RuntimeKey, Secret


def dumps(value: Any) -> str:
    # compact and key-ordered: the same value is the same text (Redis audit members are compared as text)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def secret_doc(s: Secret) -> dict[str, Any]:
    return {"digest": s.digest, "hint": s.hint, "until": s.until}


def secret_from(d: dict[str, Any]) -> Secret:
    return Secret(digest=d["digest"], hint=d["hint"], until=d.get("until"))


def key_doc(k: RuntimeKey) -> dict[str, Any]:
    return {"name": k.name, "secrets": [secret_doc(s) for s in k.secrets], "created_at": k.created_at,
            "updated_at": k.updated_at, "models": None if k.models is None else list(k.models), "limits": k.limits,
            "budget": k.budget, "groups": list(k.groups), "metadata": k.metadata, "disabled": k.disabled,
            "expires_at": k.expires_at}


def key_from(d: dict[str, Any]) -> RuntimeKey:
    models = d.get("models")
    return RuntimeKey(name=d["name"], secrets=tuple(secret_from(s) for s in d["secrets"]),
                      created_at=d["created_at"], updated_at=d["updated_at"],
                      models=None if models is None else tuple(models), limits=d.get("limits"),
                      budget=d.get("budget"), groups=tuple(d.get("groups") or ()), metadata=d.get("metadata") or {},
                      disabled=bool(d.get("disabled")), expires_at=d.get("expires_at"))


def group_doc(g: RuntimeGroup) -> dict[str, Any]:
    return {"name": g.name, "keys": list(g.keys), "budget": g.budget, "created_at": g.created_at,
            "updated_at": g.updated_at}


def group_from(d: dict[str, Any]) -> RuntimeGroup:
    return RuntimeGroup(name=d["name"], keys=tuple(d["keys"]), budget=d.get("budget"), created_at=d["created_at"],
                        updated_at=d["updated_at"])


def admin_doc(a: RuntimeAdmin) -> dict[str, Any]:
    return {"name": a.name, "secret": secret_doc(a.secret), "role": a.role, "created_at": a.created_at}


def admin_from(d: dict[str, Any]) -> RuntimeAdmin:
    return RuntimeAdmin(name=d["name"], secret=secret_from(d["secret"]), role=d["role"], created_at=d["created_at"])


def audit_doc(e: AuditEntry) -> dict[str, Any]:
    return {"at": e.at, "actor": e.actor, "action": e.action, "target": e.target, "before": e.before,
            "after": e.after, "request_id": e.request_id, "client": e.client}


def audit_from(d: dict[str, Any]) -> AuditEntry:
    return AuditEntry(at=d["at"], actor=d["actor"], action=d["action"], target=d["target"], before=d.get("before"),
                      after=d.get("after"), request_id=d.get("request_id"), client=d.get("client"))


def idempotent_doc(i: Idempotent) -> dict[str, Any]:
    # the sealed body is bytes: base64 in a JSON document (Redis); the state file keeps it as a BLOB
    return {"actor": i.actor, "key": i.key, "fingerprint": i.fingerprint, "status": i.status,
            "body_sealed": base64.b64encode(i.body_sealed).decode("ascii"), "expires": i.expires}


def idempotent_from(d: dict[str, Any]) -> Idempotent:
    return Idempotent(actor=d["actor"], key=d["key"], fingerprint=d["fingerprint"], status=int(d["status"]),
                      body_sealed=base64.b64decode(d["body_sealed"]), expires=d["expires"])
