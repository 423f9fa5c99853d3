"""What the key store keeps, as plain values: runtime client keys (their secrets only as digests),
key groups made at runtime, admin keys made at runtime, the runtime overlay on keys from the config
file (disabled or not), idempotency records and audit entries.

Owns the shapes every other part of proxy/keys/ agrees on; decides nothing. Amounts and limits are
kept in the config file's own shape (`limits`, `budget` as the YAML has them), so one parser
(proxy.config.keys, proxy.config.money) turns both into the types requests are checked with.
Times are epoch seconds. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RUNTIME, CONFIG = "runtime", "config"  # where a key comes from (`origin`)
ADMIN, VIEWER = "admin", "viewer"  # admin key roles


@dataclass(frozen=True)
class Secret:
    """One secret a key answers to, as the store keeps it: never the secret itself."""

    digest: str  # hex HMAC-SHA256 of the secret under the install's pepper
    hint: str  # "sk-…a1b2": enough to tell keys apart, no use for finding one
    until: float | None = None  # None: the current secret; else when it stops (a rotation's grace)


@dataclass(frozen=True)
class RuntimeKey:
    """A client key made at runtime."""

    name: str
    secrets: tuple[Secret, ...]  # the current one first; older ones only while their grace lasts
    created_at: float
    updated_at: float
    models: tuple[str, ...] | None = None  # globs; None: every model
    limits: dict[str, Any] | None = None  # as client_keys[].limits in the config file
    budget: dict[str, Any] | None = None  # as client_keys[].budget in the config file
    groups: tuple[str, ...] = ()  # key groups (config or runtime) whose budgets it shares
    metadata: dict[str, Any] = field(default_factory=dict)  # the caller's, kept and shown as given
    disabled: bool = False
    expires_at: float | None = None  # None: never


@dataclass(frozen=True)
class RuntimeGroup:
    """A key group made at runtime: `keys` are names of client keys (config or runtime)."""

    name: str
    keys: tuple[str, ...]
    budget: dict[str, Any] | None  # as key_groups[].budget in the config file
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class RuntimeAdmin:
    """An admin key made at runtime."""

    name: str
    secret: Secret
    role: str  # admin | viewer
    created_at: float


@dataclass(frozen=True)
class Overlay:
    """What runtime changed on a key from the config file (the file decides which keys exist)."""

    name: str
    disabled: bool


@dataclass(frozen=True)
class Snapshot:
    """Everything the store holds but the audit log, at one version."""

    version: int
    keys: dict[str, RuntimeKey] = field(default_factory=dict)
    groups: dict[str, RuntimeGroup] = field(default_factory=dict)
    admins: dict[str, RuntimeAdmin] = field(default_factory=dict)
    overlays: dict[str, Overlay] = field(default_factory=dict)  # by config key name (client or admin)
    last_used: dict[str, float] = field(default_factory=dict)  # key name → when last presented (any origin)


@dataclass(frozen=True)
class Change:
    """One change, applied atomically with its audit entry. `new_*` names must not exist yet —
    among runtime keys, groups, admin keys, and `taken` (the config file's names, which the caller
    passes) — else the store raises `NameTaken` and applies nothing."""

    put_keys: tuple[RuntimeKey, ...] = ()
    new_keys: tuple[str, ...] = ()  # of put_keys: those that must be new
    delete_keys: tuple[str, ...] = ()
    put_groups: tuple[RuntimeGroup, ...] = ()
    new_groups: tuple[str, ...] = ()
    delete_groups: tuple[str, ...] = ()
    put_admins: tuple[RuntimeAdmin, ...] = ()
    new_admins: tuple[str, ...] = ()
    delete_admins: tuple[str, ...] = ()
    put_overlays: tuple[Overlay, ...] = ()
    taken: tuple[str, ...] = ()  # names the config file uses (client keys, admin keys, groups)


@dataclass(frozen=True)
class AuditEntry:
    at: float
    actor: str  # an admin key's name, or "cli", or "config-reload"
    action: str  # key.create, key.update, key.rotate, key.revoke, group.*, admin.*, account.*, config.reload…
    target: str  # e.g. "key:team-a", "group:eng", "admin:ops", "account:main/a1"
    before: dict[str, Any] | None  # the target's public view before (never a secret or digest)
    after: dict[str, Any] | None
    request_id: str | None = None
    client: str | None = None  # the caller's address; None for the CLI


@dataclass(frozen=True)
class Idempotent:
    """A create or rotate answered under an Idempotency-Key: kept an hour, the secret sealed."""

    actor: str
    key: str  # the Idempotency-Key header's value
    fingerprint: str  # digest of the method, path and body: the same key with another body is a 422
    status: int
    body_sealed: bytes  # the answer's JSON, the secret in it, sealed with the install's key (AES-GCM)
    expires: float


class NameTaken(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name
