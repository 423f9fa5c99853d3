"""The `client_keys` section: the keys clients present, each with a name and what it may do.

Owns the shape of a client key and its checks. An entry is either a plain string (the key; its
name is derived from a hash prefix, `key-1a2b3c4d`, stable and no use for finding the key) or an
object `{name, key, models: [glob…], disabled: bool, limits: {…}, budget: {…}}` (proxy/config/limits.py,
proxy/config/money.py).
Names are what logs, usage and metrics show —
never the key — so they must be unique and printable; keys must be unique (two entries with one key
could not tell which name a request belongs to); `models` are globs over the client's model name
(the same `fnmatchcase` rules as an upstream's `models.serve`), absent for every model.
Error messages name the entry by its path (`client_keys[2].models[0]`) and never quote a key.
And the `keys:` section, which shapes keys made at runtime (proxy/keys/): `prefix` (what their
secrets start with, default `sk-`) and `pepper` (the install's secret their digests are made with;
unset: generated once, proxy/keys/pepper.py).
Import-light: stdlib only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any

from proxy.config.limits import KeyLimits, parse_limits
from proxy.config.money import Budget, parse_budget
from proxy.config.values import ConfigError, bool_, join, known, mapping, required, str_

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}$")
_PREFIX = re.compile(r"^[A-Za-z0-9._-]{1,16}$")
MIN_PEPPER_CHARS = 32


def derived_name(key: str) -> str:
    """The name of a key that has none of its own: a short prefix of its SHA-256."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class ClientKey:
    name: str
    key: str = field(repr=False)
    models: tuple[str, ...] | None = None  # globs over client model names; None: every model
    disabled: bool = False
    limits: KeyLimits | None = None  # None: no limit of its own
    budget: Budget | None = None  # USD it may spend (proxy/money/); None: no budget of its own
    role: str | None = None  # admin keys: "admin" (may change things) or "viewer" (may only read); None: a client key

    @classmethod
    def plain(cls, key: str) -> ClientKey:
        return cls(name=derived_name(key), key=key)

    def allows(self, model: str) -> bool:
        return self.models is None or any(fnmatchcase(model, pattern) for pattern in self.models)


def parse_client_keys(value: Any, path: str, at_least_one: bool = True) -> tuple[ClientKey, ...]:
    if value is None:
        value = []
    if isinstance(value, str | dict):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(path, "must be a list of keys: strings, or {name, key, models, disabled, limits, budget} "
                                "entries")
    entries = tuple(_entry(item, f"{path}[{i}]") for i, item in enumerate(value))
    if at_least_one and not entries:
        raise ConfigError(path, "must list at least one key that clients present")
    names: dict[str, int] = {}
    secrets: dict[str, int] = {}
    for i, entry in enumerate(entries):
        where = f"{path}[{i}]"
        is_object = isinstance(value[i], dict)
        if entry.key in secrets:
            raise ConfigError(join(where, "key") if is_object else where,
                              f"the same key as {path}[{secrets[entry.key]}]: each key may be listed once")
        secrets[entry.key] = i
        if entry.name in names:
            raise ConfigError(join(where, "name") if is_object else where,
                              f"the name {entry.name!r} is already used by {path}[{names[entry.name]}]; "
                              "names must be unique")
        names[entry.name] = i
    return entries


def _entry(raw: Any, path: str) -> ClientKey:
    if not isinstance(raw, dict):
        return ClientKey.plain(str_(raw, path))
    known(raw, path, {"name", "key", "models", "disabled", "limits", "budget"})
    name = str_(required(raw, "name", path), join(path, "name"))
    if not _NAME.match(name):
        raise ConfigError(join(path, "name"), f"must be 1 to 64 letters, digits or . _ @ : - (starting with a "
                                              f"letter or digit), as it appears in logs and metrics (got {name!r})")
    key = str_(required(raw, "key", path), join(path, "key"))
    if key == name:
        raise ConfigError(join(path, "name"), "must not be the key itself: the name is shown in logs and usage")
    models = None if "models" not in raw else _models(raw["models"], join(path, "models"))
    return ClientKey(name=name, key=key, models=models, disabled=bool_(raw.get("disabled", False),
                                                                        join(path, "disabled")),
                     limits=parse_limits(raw.get("limits"), join(path, "limits")),
                     budget=parse_budget(raw.get("budget"), join(path, "budget")))


def parse_models(value: Any, path: str) -> tuple[str, ...]:
    """A key's `models` globs (also for keys made at runtime, proxy/keys/service.py)."""
    return _models(value, path)


def valid_name(name: str) -> bool:
    """Whether `name` may name a key (it appears in logs and metrics)."""
    return bool(_NAME.match(name))


ADMIN_ROLES = ("admin", "viewer")


def parse_admin_keys(value: Any, path: str) -> tuple[ClientKey, ...]:
    """`admin_keys`: plain strings (role admin) or `{name, key, role}` entries, names and keys unique."""
    if value is None:
        value = []
    if isinstance(value, str | dict):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(path, "must be a list of keys: strings, or {name, key, role} entries")
    found: list[ClientKey] = []
    for i, raw in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(raw, dict):
            found.append(replace(ClientKey.plain(str_(raw, where)), role="admin"))
            continue
        known(raw, where, {"name", "key", "role"})
        role = str_(raw.get("role", "admin"), join(where, "role"))
        if role not in ADMIN_ROLES:
            raise ConfigError(join(where, "role"), f"must be admin (may change things) or viewer (may only read), "
                                                   f"not {role!r}")
        entry = _entry({"name": required(raw, "name", where), "key": required(raw, "key", where)}, where)
        found.append(replace(entry, role=role))
    names = [k.name for k in found]
    secrets = [k.key for k in found]
    for i, entry in enumerate(found):
        if names.index(entry.name) != i:
            raise ConfigError(f"{path}[{i}]", f"the name {entry.name!r} is already used; names must be unique")
        if secrets.index(entry.key) != i:
            raise ConfigError(f"{path}[{i}]", f"the same key as {path}[{secrets.index(entry.key)}]")
    return tuple(found)


def _models(value: Any, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ConfigError(path, "must be a non-empty list of model name patterns such as 'gpt-4o*' "
                                "(leave models out to allow every model)")
    return tuple(_glob(item, f"{path}[{i}]") for i, item in enumerate(value))


def _glob(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(path, f"must be a model name pattern such as 'claude-*' (got {value!r})")
    if value != value.strip() or any(c.isspace() for c in value):
        raise ConfigError(path, f"a model name pattern has no spaces (got {value!r})")
    i = 0
    while i < len(value):  # fnmatch takes an unclosed '[' literally; in a model pattern it is a typo
        if value[i] == "[":
            j = i + 1
            j += value[j:j + 1] == "!"
            j += value[j:j + 1] == "]"  # a ']' first in the class is one of its characters
            end = value.find("]", j)
            if end < 0:
                raise ConfigError(path, f"'[' opens a character class that is never closed with ']' (got {value!r})")
            i = end + 1
        elif value[i] == "]":
            raise ConfigError(path, f"']' closes a character class that was never opened (got {value!r})")
        else:
            i += 1
    return value


@dataclass(frozen=True)
class KeysSettings:
    """The `keys:` section."""

    prefix: str = "sk-"  # what a runtime key's secret starts with: recognisable in logs and secret scanners
    pepper: str | None = field(default=None, repr=False)  # None: generated once (proxy/keys/pepper.py)


def parse_keys_settings(raw: Any, path: str) -> KeysSettings:
    section = mapping(raw, path)
    known(section, path, {"prefix", "pepper"})
    default = KeysSettings()
    prefix = str_(section.get("prefix", default.prefix), join(path, "prefix"))
    if not _PREFIX.match(prefix):
        raise ConfigError(join(path, "prefix"), f"must be 1 to 16 letters, digits or . _ - (got {prefix!r})")
    pepper = section.get("pepper")
    if pepper is not None:
        pepper = str_(pepper, join(path, "pepper"))
        if len(pepper) < MIN_PEPPER_CHARS:
            raise ConfigError(join(path, "pepper"), f"must be at least {MIN_PEPPER_CHARS} characters (e.g. the output "
                                                    "of `openssl rand -hex 32`): every runtime key's digest is made "
                                                    "with it")
    return KeysSettings(prefix=prefix, pepper=pepper)


@dataclass(frozen=True)
class AuditSettings:
    """The `audit:` section: how long the audit trail of admin changes is kept."""

    retention_days: int = 365


def parse_audit_settings(raw: Any, path: str) -> AuditSettings:
    section = mapping(raw, path)
    known(section, path, {"retention_days"})
    days = section.get("retention_days", AuditSettings.retention_days)
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ConfigError(join(path, "retention_days"), f"must be a whole number of days, at least 1 (got {days!r})")
    return AuditSettings(retention_days=days)
