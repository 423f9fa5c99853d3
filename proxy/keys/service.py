"""What an operator can do to keys at runtime, the same for the admin API and the CLI: create,
change, rotate, disable and revoke client keys, and disable keys from the config file.

Owns each operation whole — the caller's body checked field by field (a 400 naming the field and
saying what to fix, before anything is written), the change and its audit entry committed together
(proxy/keys/store.py), an `Idempotency-Key` honoured (the same answer for an hour, its secret
sealed under the install's key, never a second key) — and each key's public view, which never
holds a secret or a digest. The secret of a new or rotated key is in the answer once. Pure of
Flask: the blueprint (proxy/blueprints/key_admin.py) and the CLI pass the actor and the context.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from proxy.config.keys import ClientKey, parse_models, valid_name
from proxy.config.limits import parse_limits
from proxy.config.money import parse_budget
from proxy.config.values import ConfigError
from proxy.errors import ProxyError
from proxy.keys import secrets
from proxy.keys.model import CONFIG, RUNTIME, AuditEntry, Change, Idempotent, NameTaken, Overlay, RuntimeKey, Secret
from proxy.keys.store import KeyStore

CREATE_FIELDS = {"name", "models", "limits", "budget", "groups", "expires_at", "metadata"}
UPDATE_FIELDS = {"models", "limits", "budget", "groups", "expires_at", "metadata", "disabled"}
MAX_GRACE = 30 * 86400  # seconds: an old secret may outlive its rotation by at most 30 days
IDEMPOTENT_FOR = 3600.0  # seconds an Idempotency-Key's answer is kept
MAX_METADATA = 4096  # bytes of JSON


Keep = Callable[[int, dict[str, Any]], "Idempotent | None"]  # an answer → the record kept for it (None: no key)


@dataclass(frozen=True)
class Context:
    """Who asks, for the audit trail."""

    actor: str  # an admin key's name, or "cli"
    request_id: str | None = None
    client: str | None = None


class KeyService:
    def __init__(self, store: KeyStore, pepper: bytes, prefix: str, config_keys: tuple[ClientKey, ...],
                 taken: tuple[str, ...], clock: Callable[[], float] = time.time,
                 group_names: tuple[str, ...] = ()) -> None:
        self.store = store
        self.pepper = pepper
        self.prefix = prefix
        self.config_keys = {k.name: k for k in config_keys}
        self.taken = taken  # every name the config file uses: client keys, admin keys, key groups
        self.group_names = group_names  # the config file's key groups
        self.clock = clock
        self._sealer = secrets.Sealer(pepper)

    # ------------------------------------------------------------ reading

    def view(self, name: str) -> dict[str, Any]:
        snapshot = self.store.snapshot()
        if name in snapshot.keys:
            return runtime_view(snapshot.keys[name], snapshot.last_used.get(name))
        if name in self.config_keys:
            overlay = snapshot.overlays.get(name)
            return config_view(self.config_keys[name], overlay, snapshot.last_used.get(name))
        raise _unknown(name)

    def views(self) -> list[dict[str, Any]]:
        snapshot = self.store.snapshot()
        shown = [config_view(k, snapshot.overlays.get(n), snapshot.last_used.get(n))
                 for n, k in self.config_keys.items()]
        shown += [runtime_view(k, snapshot.last_used.get(n)) for n, k in sorted(snapshot.keys.items())]
        return shown

    # ------------------------------------------------------------ changing

    def create(self, ctx: Context, body: Any, idempotency_key: str | None = None) -> tuple[int, dict[str, Any]]:
        return self._idempotent(ctx, "POST /admin/keys", body, idempotency_key,
                                lambda keep: self._create(ctx, body, keep))

    def _create(self, ctx: Context, body: Any, keep: Keep) -> tuple[int, dict[str, Any]]:
        fields = _object(body, CREATE_FIELDS)
        name = _name(fields.get("name"))
        now = self.clock()
        secret = secrets.mint(self.prefix)
        key = RuntimeKey(name=name, secrets=(self.secret_of(secret),), created_at=now, updated_at=now,
                         **_settings(fields, now, self._group_names()))
        after = runtime_view(key, None)
        answer = {"key": after, "secret": secret}
        self._commit(ctx, Change(put_keys=(key,), new_keys=(name,), taken=self.taken), "key.create", name, None,
                     after, keep(201, answer))
        return 201, answer

    def update(self, ctx: Context, name: str, body: Any) -> dict[str, Any]:
        snapshot = self.store.snapshot()
        if name in self.config_keys and name not in snapshot.keys:
            fields = _object(body, UPDATE_FIELDS)
            other = sorted(set(fields) - {"disabled"})
            if other:
                raise ProxyError(400, f"{other[0]}: the key {name!r} comes from the config file; change it there "
                                      "(only `disabled` can be set at runtime).", "invalid_request", param=other[0])
            if "disabled" not in fields:
                raise ProxyError(400, "disabled: say true or false.", "invalid_request", param="disabled")
            before = self.view(name)
            overlay = Overlay(name, _bool(fields["disabled"], "disabled"))
            after = config_view(self.config_keys[name], overlay, snapshot.last_used.get(name))
            action = "key.disable" if overlay.disabled else "key.enable"
            self._commit(ctx, Change(put_overlays=(overlay,)), action, name, before, after)
            return after
        key = snapshot.keys.get(name)
        if key is None:
            raise _unknown(name)
        fields = _object(body, UPDATE_FIELDS)
        now = self.clock()
        changed = replace(key, updated_at=now, **_settings(fields, now, self._group_names(), partial=True))
        if "disabled" in fields:
            changed = replace(changed, disabled=_bool(fields["disabled"], "disabled"))
        before, after = runtime_view(key, None), runtime_view(changed, snapshot.last_used.get(name))
        self._commit(ctx, Change(put_keys=(changed,)), "key.update", name, before, after)
        return after

    def rotate(self, ctx: Context, name: str, body: Any,
               idempotency_key: str | None = None) -> tuple[int, dict[str, Any]]:
        return self._idempotent(ctx, f"POST /admin/keys/{name}/rotate", body, idempotency_key,
                                lambda keep: self._rotate(ctx, name, body, keep))

    def _rotate(self, ctx: Context, name: str, body: Any, keep: Keep) -> tuple[int, dict[str, Any]]:
        fields = _object(body if body is not None else {}, {"grace_seconds"})
        grace = fields.get("grace_seconds", 0)
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= MAX_GRACE:
            raise ProxyError(400, f"grace_seconds: must be a number of seconds from 0 to {MAX_GRACE} (30 days), for "
                                  f"how long the old secret keeps working (got {grace!r}).", "invalid_request",
                             param="grace_seconds")
        key = self.store.snapshot().keys.get(name)
        if key is None:
            raise self._not_runtime(name)
        now = self.clock()
        secret = secrets.mint(self.prefix)
        until = now + float(grace)
        kept = tuple(replace(s, until=until if s.until is None else min(s.until, until)) for s in key.secrets
                     if (s.until is None or s.until > now) and grace > 0)
        rotated = replace(key, secrets=(self.secret_of(secret), *kept), updated_at=now)
        before, after = runtime_view(key, None), runtime_view(rotated, None)
        answer = {"key": after, "secret": secret}
        self._commit(ctx, Change(put_keys=(rotated,)), "key.rotate", name, before, after, keep(200, answer))
        return 200, answer

    def revoke(self, ctx: Context, name: str) -> dict[str, Any]:
        key = self.store.snapshot().keys.get(name)
        if key is None:
            raise self._not_runtime(name)
        self._commit(ctx, Change(delete_keys=(name,)), "key.revoke", name, runtime_view(key, None), None)
        return {"name": name, "revoked": True}

    # ------------------------------------------------------------ parts

    def _commit(self, ctx: Context, change: Change, action: str, name: str, before: dict[str, Any] | None,
                after: dict[str, Any] | None, idempotent: Idempotent | None = None) -> None:
        self.commit(ctx, change, action, f"key:{name}", before, after, idempotent)

    def commit(self, ctx: Context, change: Change, action: str, target: str, before: dict[str, Any] | None,
               after: dict[str, Any] | None, idempotent: Idempotent | None = None) -> None:
        """`change` and its audit entry, together; a name taken is a 400 naming the field."""
        entry = AuditEntry(at=self.clock(), actor=ctx.actor, action=action, target=target, before=before,
                           after=after, request_id=ctx.request_id, client=ctx.client)
        try:
            self.store.commit(change, entry, idempotent)
        except NameTaken as taken:
            raise ProxyError(400, f"name: the name {taken.name!r} is already used by another key (in the config file "
                                  "or made at runtime); names are unique.", "invalid_request", param="name") from None

    def _group_names(self) -> set[str]:
        return set(self.group_names) | set(self.store.snapshot().groups)

    def secret_of(self, secret: str) -> Secret:
        """What the store keeps of `secret`: its digest and hint."""
        return Secret(secrets.digest(secret, self.pepper), secrets.hint(secret, self.prefix))

    def _idempotent(self, ctx: Context, what: str, body: Any, idempotency_key: str | None,
                    run: Callable[[Keep], tuple[int, dict[str, Any]]]) -> tuple[int, dict[str, Any]]:
        """`run`, or the answer kept for this Idempotency-Key; `run` commits the record with its change."""
        if not idempotency_key:
            return run(lambda status, answer: None)
        if len(idempotency_key) > 255:
            raise ProxyError(400, "Idempotency-Key: at most 255 characters.", "invalid_request",
                             param="Idempotency-Key")
        fingerprint = hashlib.sha256(f"{what}\n{json.dumps(body, sort_keys=True)}".encode()).hexdigest()
        now = self.clock()
        kept = self.store.idempotent(ctx.actor, idempotency_key, now)
        if kept is not None:
            if kept.fingerprint != fingerprint:
                raise ProxyError(422, "Idempotency-Key: this key was used within the hour for another request; use a "
                                      "new key for a new request.", "invalid_request", param="Idempotency-Key")
            return kept.status, json.loads(self._sealer.open(kept.body_sealed))

        def keep(status: int, answer: dict[str, Any]) -> Idempotent:
            return Idempotent(actor=ctx.actor, key=idempotency_key, fingerprint=fingerprint, status=status,
                              body_sealed=self._sealer.seal(json.dumps(answer).encode()),
                              expires=now + IDEMPOTENT_FOR)
        return run(keep)

    def _not_runtime(self, name: str) -> ProxyError:
        if name in self.config_keys:
            return ProxyError(400, f"The key {name!r} comes from the config file: remove it there, or disable it "
                                   "here (PATCH with {\"disabled\": true}).", "invalid_request", param="name")
        return _unknown(name)


def _groups(value: Any, known_groups: set[str]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        raise ProxyError(400, "groups: a list of key group names.", "invalid_request", param="groups")
    unknown = [g for g in value if g not in known_groups]
    if unknown:
        raise ProxyError(400, f"groups: no key group is named {unknown[0]!r} (in the config file or made at runtime: "
                              "GET /admin/key-groups).", "invalid_request", param="groups")
    return tuple(dict.fromkeys(value))


def _settings(fields: dict[str, Any], now: float, known_groups: set[str], partial: bool = False) -> dict[str, Any]:
    """The key's settings from the caller's fields, each checked; with `partial`, only those given."""
    found: dict[str, Any] = {}
    if "models" in fields or not partial:
        raw_models = fields.get("models")
        found["models"] = None if raw_models is None else _checked("models", lambda: parse_models(raw_models, "models"))
    if "limits" in fields or not partial:
        raw = fields.get("limits")
        _checked("limits", lambda: parse_limits(raw, "limits"))
        found["limits"] = raw
    if "budget" in fields or not partial:
        raw_budget = fields.get("budget")
        _checked("budget", lambda: parse_budget(raw_budget, "budget"))
        found["budget"] = raw_budget
    if "expires_at" in fields or not partial:
        found["expires_at"] = _expiry(fields.get("expires_at"), now)
    if "groups" in fields or not partial:
        found["groups"] = _groups(fields.get("groups") or [], known_groups)
    if "metadata" in fields or not partial:
        metadata = fields.get("metadata") or {}
        if not isinstance(metadata, dict) or len(json.dumps(metadata)) > MAX_METADATA:
            raise ProxyError(400, f"metadata: must be a JSON object of at most {MAX_METADATA} bytes.",
                             "invalid_request", param="metadata")
        found["metadata"] = metadata
    return found


def _checked(field: str, parse: Callable[[], Any]) -> Any:
    try:
        return parse()
    except ConfigError as exc:
        raise ProxyError(400, f"{exc}", "invalid_request", param=field) from None


def _expiry(value: Any, now: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        at = None
    elif isinstance(value, int | float):
        at = float(value)
    elif isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            at = (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()
        except ValueError:
            at = None
    else:
        at = None
    if at is None:
        raise ProxyError(400, f"expires_at: must be a time, as ISO 8601 (2027-01-31T00:00:00Z) or epoch seconds "
                              f"(got {value!r}).", "invalid_request", param="expires_at")
    if at <= now:
        raise ProxyError(400, f"expires_at: {iso(at)} is in the past; give a time to come.", "invalid_request",
                         param="expires_at")
    return at


def _object(body: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ProxyError(400, "The body must be a JSON object.", "invalid_request")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise ProxyError(400, f"{unknown[0]}: unknown field; the fields are {', '.join(sorted(allowed))}.",
                         "invalid_request", param=unknown[0])
    return body


def _name(value: Any) -> str:
    if not isinstance(value, str) or not valid_name(value):
        raise ProxyError(400, f"name: must be 1 to 64 letters, digits or . _ @ : - (starting with a letter or digit), "
                              f"as it appears in logs and metrics (got {value!r}).", "invalid_request", param="name")
    return value


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise ProxyError(400, f"{field}: must be true or false (got {value!r}).", "invalid_request", param=field)
    return value


def _unknown(name: str) -> ProxyError:
    return ProxyError(404, f"No key is named {name!r}; GET /admin/keys lists them.", "not_found")


def iso(at: float | None) -> str | None:
    return None if at is None else dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def runtime_view(key: RuntimeKey, last_used: float | None) -> dict[str, Any]:
    current = next((s for s in key.secrets if s.until is None), key.secrets[0])
    rotating = [s.until for s in key.secrets if s.until is not None]
    return {"name": key.name, "origin": RUNTIME, "hint": current.hint, "created_at": iso(key.created_at),
            "last_used_at": iso(last_used), "expires_at": iso(key.expires_at), "disabled": key.disabled,
            "models": list(key.models) if key.models is not None else None, "limits": key.limits,
            "budget_usd": key.budget, "groups": list(key.groups), "metadata": key.metadata,
            "rotating_until": iso(max(rotating)) if rotating else None}


def config_view(key: ClientKey, overlay: Overlay | None, last_used: float | None) -> dict[str, Any]:
    return {"name": key.name, "origin": CONFIG, "hint": None, "created_at": None, "last_used_at": iso(last_used),
            "expires_at": None, "disabled": overlay.disabled if overlay is not None else key.disabled,
            "models": list(key.models) if key.models is not None else None,
            "limits": dict(key.limits.items()) if key.limits is not None else None, "budget_usd": None,
            "groups": [], "metadata": {}, "rotating_until": None}
