"""Admin keys made at runtime: the key API's `/admin/admin-keys` operations.

Owns creating one (`{name, role}` → its secret, once; stored as a digest like client keys),
deleting one — never the last key with the admin role, so the admin API cannot lock itself out —
and the list: the config file's admin keys (origin `config`, read-only here) and the runtime ones,
by name, role and hint, never a secret. Each change is committed with its audit entry through the
key service (proxy/keys/service.py). Pure of Flask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.config.keys import ADMIN_ROLES, ClientKey
from proxy.errors import ProxyError
from proxy.keys import secrets
from proxy.keys.model import ADMIN, CONFIG, RUNTIME, Change, RuntimeAdmin

if TYPE_CHECKING:
    from proxy.keys.service import Context, KeyService


def admin_views(service: KeyService, config_admins: tuple[ClientKey, ...]) -> list[dict[str, Any]]:
    shown = [{"name": k.name, "origin": CONFIG, "role": k.role or ADMIN, "hint": None} for k in config_admins]
    shown += [_view(a) for _, a in sorted(service.store.snapshot().admins.items())]
    return shown


def create_admin(service: KeyService, ctx: Context, body: Any) -> dict[str, Any]:
    from proxy.keys.service import _name, _object

    fields = _object(body, {"name", "role"})
    name = _name(fields.get("name"))
    role = fields.get("role", ADMIN)
    if role not in ADMIN_ROLES:
        raise ProxyError(400, f"role: admin (may change things) or viewer (may only read), not {role!r}.",
                         "invalid_request", param="role")
    secret = secrets.mint(service.prefix)
    admin = RuntimeAdmin(name=name, secret=service.secret_of(secret), role=role, created_at=service.clock())
    after = _view(admin)
    service.commit(ctx, Change(put_admins=(admin,), new_admins=(name,), taken=service.taken), "admin.create",
                   f"admin:{name}", None, after)
    return {**after, "secret": secret}


def delete_admin(service: KeyService, ctx: Context, name: str, config_admins: tuple[ClientKey, ...]) -> dict[str, Any]:
    admins = service.store.snapshot().admins
    if name not in admins:
        if any(k.name == name for k in config_admins):
            raise ProxyError(400, f"The admin key {name!r} comes from the config file: remove it there.",
                             "invalid_request", param="name")
        raise ProxyError(404, f"No admin key is named {name!r}; GET /admin/admin-keys lists them.", "not_found")
    left = sum((k.role or ADMIN) == ADMIN for k in config_admins) + sum(
        a.role == ADMIN for n, a in admins.items() if n != name)
    if left == 0:
        raise ProxyError(400, f"The admin key {name!r} is the last one with the admin role: create another first, "
                              "so that someone can still change things.", "invalid_request", param="name")
    service.commit(ctx, Change(delete_admins=(name,)), "admin.delete", f"admin:{name}", _view(admins[name]), None)
    return {"name": name, "deleted": True}


def _view(admin: RuntimeAdmin) -> dict[str, Any]:
    return {"name": admin.name, "origin": RUNTIME, "role": admin.role, "hint": admin.secret.hint}
