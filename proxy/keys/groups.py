"""Key groups made at runtime, and the effective groups budgets are checked against.

Owns the group operations of the key API (create, change, delete a group; the file's groups are
read-only here: the file decides which exist) — each checked field by field and committed with its
audit entry through the key service (proxy/keys/service.py) — and `effective`: the config's groups
with the runtime keys that name them (a runtime key's `groups`), plus the runtime groups, as one
`key_groups` that USD budgets read (proxy/budgets/windows.py `subjects`). Pure of Flask.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from proxy.config.model import Config
from proxy.config.money import KeyGroup, parse_budget
from proxy.errors import ProxyError
from proxy.keys.model import Change, RuntimeGroup, Snapshot

if TYPE_CHECKING:
    from proxy.keys.service import Context, KeyService

GROUP_FIELDS = {"name", "keys", "budget"}


def group_view(group: KeyGroup | RuntimeGroup, origin: str, members: tuple[str, ...] = ()) -> dict[str, Any]:
    keys = [*group.keys, *(m for m in members if m not in group.keys)]
    budget = group.budget if isinstance(group, RuntimeGroup) else None
    return {"name": group.name, "origin": origin, "keys": keys, "budget_usd": budget}


def create_group(service: KeyService, ctx: Context, body: Any) -> dict[str, Any]:
    from proxy.keys.service import _name, _object

    fields = _object(body, GROUP_FIELDS)
    name = _name(fields.get("name"))
    now = service.clock()
    group = RuntimeGroup(name=name, keys=_members(fields.get("keys", [])),
                         budget=_budget(fields.get("budget")), created_at=now, updated_at=now)
    after = group_view(group, "runtime")
    service.commit(ctx, Change(put_groups=(group,), new_groups=(name,), taken=service.taken), "group.create",
                   f"group:{name}", None, after)
    return after


def update_group(service: KeyService, ctx: Context, name: str, body: Any) -> dict[str, Any]:
    from proxy.keys.service import _object

    group = service.store.snapshot().groups.get(name)
    if group is None:
        raise _not_runtime(service, name)
    fields = _object(body, GROUP_FIELDS - {"name"})
    changed = replace(group, updated_at=service.clock(),
                      keys=_members(fields["keys"]) if "keys" in fields else group.keys,
                      budget=_budget(fields["budget"]) if "budget" in fields else group.budget)
    before, after = group_view(group, "runtime"), group_view(changed, "runtime")
    service.commit(ctx, Change(put_groups=(changed,)), "group.update", f"group:{name}", before, after)
    return after


def delete_group(service: KeyService, ctx: Context, name: str) -> dict[str, Any]:
    group = service.store.snapshot().groups.get(name)
    if group is None:
        raise _not_runtime(service, name)
    service.commit(ctx, Change(delete_groups=(name,)), "group.delete", f"group:{name}", group_view(group, "runtime"),
                   None)
    return {"name": name, "deleted": True}


def effective(config: Config, snapshot: Snapshot) -> tuple[KeyGroup, ...]:
    """The config's groups and the runtime groups, each with every runtime key that names it."""
    members: dict[str, list[str]] = {}
    for key in snapshot.keys.values():
        for name in key.groups:
            members.setdefault(name, []).append(key.name)
    found = [replace(g, keys=(*g.keys, *members.get(g.name, ()))) if g.name in members else g
             for g in config.key_groups]
    for group in snapshot.groups.values():
        try:
            budget = parse_budget(group.budget, f"key_groups.{group.name}.budget")
        except Exception:  # a stored budget this version cannot read: the group counts without one
            budget = None
        found.append(KeyGroup(group.name, (*group.keys, *members.get(group.name, ())), budget))
    return tuple(found)


def _members(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(k, str) and k for k in value):
        raise ProxyError(400, "keys: a list of client key names.", "invalid_request", param="keys")
    return tuple(dict.fromkeys(value))


def _budget(value: Any) -> dict[str, Any] | None:
    from proxy.keys.service import _checked

    _checked("budget", lambda: parse_budget(value, "budget"))
    return value if value is None else dict(value)


def _not_runtime(service: KeyService, name: str) -> ProxyError:
    if name in service.taken:
        return ProxyError(400, f"The key group {name!r} comes from the config file: change it there.",
                          "invalid_request", param="name")
    return ProxyError(404, f"No key group is named {name!r}; GET /admin/key-groups lists them.", "not_found")
