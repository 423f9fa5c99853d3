"""The vocabulary the config's description is written in: JSON Schema fragments for the kinds of
value (`STRING`, `number()`, `one_of()`…), `Section` (a mapping with a fixed set of keys) and `Key`
(one key: its value, meaning, default and where the loader puts it).

Owns these building blocks only; the keys themselves are described in `proxy.config.spec` (and
its money sections in `proxy.config.money_spec`). Import-light: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Schema = dict[str, Any]

# A value read from the environment when the file is loaded: a string, whatever the key's type.
ENV: Schema = {"type": "string", "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}"}
STRING: Schema = {"type": "string", "minLength": 1}
BOOLEAN: Schema = {"type": "boolean"}
STRINGS: Schema = {"type": "array", "items": STRING}


def number(minimum: float | None = None, whole: bool = False) -> Schema:
    """A number (the loader also takes one written as a string, as `${VAR}` gives it)."""
    plain: Schema = {"type": "integer" if whole else "number"}
    if minimum is not None:
        plain["minimum"] = minimum
    return {"anyOf": [plain, ENV]}


def one_of(values: tuple[str, ...]) -> Schema:
    return {"anyOf": [{"enum": list(values)}, ENV]}


def string_map(what: str) -> Schema:
    """A mapping whose keys the user chooses, each value a string."""
    return {"type": "object", "additionalProperties": {"type": "string"}, "description": what}


def one_or_list(item: Schema, non_empty: bool = True) -> Schema:
    """The loader's `x` or `[x, …]`."""
    listed: Schema = {"type": "array", "items": item}
    if non_empty:
        listed["minItems"] = 1
    return {"anyOf": [item, listed]}


SIZE: Schema = {"anyOf": [{"type": "integer", "minimum": 1},
                          {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*([KMG]i?B|B)?\s*$"}, ENV]}


@dataclass(frozen=True)
class Section:
    """A mapping with a fixed set of keys: anything else is an error."""

    keys: tuple[Key, ...]
    # The loader also takes a bare string here (a client key given as just the key).
    or_string: str | None = None


@dataclass(frozen=True)
class Key:
    name: str
    value: Section | Schema
    meaning: str
    default: str = "none"  # as the reference shows it
    required: bool = False
    listed: str | None = None  # "list": a list of `value`; "list_or_one": that, or one `value` alone
    # Where the loader puts the value in the validated Config (dotted, `upstreams.0.pool.policy`), and
    # the value it has when the key is left out: tests check the stated default against the loader.
    applies: tuple[str, Any] | None = None


def key(name: str, value: Section | Schema, meaning: str, default: str = "none", **kw: Any) -> Key:
    return Key(name, value, meaning, default, **kw)
