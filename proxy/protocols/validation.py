"""Type checks for decoded JSON request bodies, shared by the three request decoders.

Owns the wording of 400 messages about request shape: each names the field path the client got
wrong (`messages[2].content`) and what it should be, so every protocol says it the same way.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import invalid

_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "an array",
    dict: "an object",
}


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def expect(value: Any, kind: type, path: str) -> Any:
    """Return `value` if it has JSON type `kind`, else raise a 400 naming `path`."""
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, float))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise invalid(path, f"must be {_TYPE_NAMES[kind]}, not {describe(value)}")
    return value


def get(obj: dict[str, Any], key: str, kind: type, path: str, required: bool = False) -> Any:
    """Fetch `obj[key]`, type-checked; None when absent or null and not required."""
    value = obj.get(key)
    if value is None:
        if required:
            raise invalid(join(path, key), "is required")
        return None
    return expect(value, kind, join(path, key))


def get_str_or_list(obj: dict[str, Any], key: str, path: str) -> list[str]:
    """A field that may be one string or an array of strings (e.g. `stop`)."""
    value = obj.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    expect(value, list, join(path, key))
    return [expect(v, str, join(join(path, key), i)) for i, v in enumerate(value)]


def one_of(value: Any, allowed: tuple[str, ...], path: str) -> str:
    expect(value, str, path)
    if value not in allowed:
        raise invalid(path, f"must be one of {', '.join(repr(a) for a in allowed)}, not {value!r}")
    return str(value)


def split_data_url(url: str) -> tuple[str, str] | None:
    """`data:image/png;base64,AAAA` → ("image/png", "AAAA"); None for anything else."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url.partition(",")
    if not sep or ";base64" not in head:
        return None
    return head[5:].split(";", 1)[0] or "application/octet-stream", data


def get_objects(obj: dict[str, Any], key: str, path: str) -> list[dict[str, Any]]:
    """An optional array of objects: [] when absent or null, a 400 naming the entry when not."""
    value = get(obj, key, list, path)
    if value is None:
        return []
    return [expect(entry, dict, join(join(path, key), i)) for i, entry in enumerate(value)]


def get_text(obj: dict[str, Any], key: str, path: str) -> str:
    """An optional string: "" when absent or null, a 400 naming it when it is something else."""
    value = get(obj, key, str, path)
    return value if value is not None else ""
