"""Checks on single config values, each raising ConfigError with the key path and the problem.

Owns the wording of config errors ("must be a number (got 'soon')") and `${VAR}` expansion, so
`proxy.config` reads as a description of the sections. Import-light: stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


class ConfigError(Exception):
    """A config problem, phrased as `<key path>: <what is wrong>`."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


def expand(value: Any, path: str, env: Mapping[str, str]) -> Any:
    """Replace ${VAR} and ${VAR:-default} in every string, recursively."""
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(path or "<root>", f"environment variable {name} is not set")

        return ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {k: expand(v, join(path, str(k)), env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, f"{path}[{i}]", env) for i, v in enumerate(value)]
    return value


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def mapping(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path or "<root>", f"must be a mapping (got {type(value).__name__})")
    return value


def known(m: Mapping[str, Any], path: str, allowed: set[str]) -> None:
    for key in m:
        if key not in allowed:
            raise ConfigError(join(path, str(key)), f"unknown key; expected one of {', '.join(sorted(allowed))}")


def required(m: Mapping[str, Any], key: str, path: str) -> Any:
    if m.get(key) is None:
        raise ConfigError(join(path, key), "is required")
    return m[key]


def str_(value: Any, path: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(path, f"must be a string (got {type(value).__name__})")
    text = str(value)
    if not text.strip():
        raise ConfigError(path, "must not be empty")
    return text


def choice(value: Any, path: str, allowed: tuple[str, ...]) -> str:
    text = str_(value, path)
    if text not in allowed:
        raise ConfigError(path, f"must be one of {', '.join(allowed)} (got {text!r})")
    return text


def str_map(value: Any, path: str) -> dict[str, str]:
    m = mapping(value, path)
    return {str(k): str_(v, join(path, str(k))) for k, v in m.items()}


def keys(value: Any, path: str, at_least_one: bool) -> tuple[str, ...]:
    if value is None:
        value = []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(path, "must be a list of keys")
    found = tuple(str_(k, f"{path}[{i}]") for i, k in enumerate(value))
    if at_least_one and not found:
        raise ConfigError(path, "must list at least one key that clients present")
    return found


def checked(value: Any, path: str, kind: str, convert: Callable[[Any], Any]) -> Any:
    if isinstance(value, bool):
        raise ConfigError(path, f"must be {kind} (got a boolean)")
    try:
        return convert(value)
    except (TypeError, ValueError):
        raise ConfigError(path, f"must be {kind} (got {value!r})") from None


def number(value: Any, path: str, minimum: float | None = None) -> float:
    number: float = checked(value, path, "a number", float)
    if minimum is not None and number < minimum:
        raise ConfigError(path, f"must be at least {minimum:g} (got {number:g})")
    return number


def int_(value: Any, path: str, minimum: int | None = None) -> int:
    whole = number(value, path, minimum)
    if whole != int(whole):
        raise ConfigError(path, f"must be a whole number (got {value!r})")
    return int(whole)


def bool_(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"must be true or false (got {value!r})")
    return value


def size(value: Any, path: str) -> int:
    """A byte count: an integer, or a string such as '32MiB' / '500 KB'."""
    if isinstance(value, str):
        match = _SIZE.match(value)
        if not match:
            raise ConfigError(path, f"must be a size such as 33554432 or '32MiB' (got {value!r})")
        unit = (match.group(2) or "B").lower()
        value = float(match.group(1)) * _SIZE_UNITS[unit]
    return int_(value, path, minimum=1)
