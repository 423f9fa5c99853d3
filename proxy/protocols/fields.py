"""Lenient readers of fields in what upstreams send, shared by every response and stream decoder.

Owns one policy: a field of the wrong type counts as absent — an upstream's odd JSON must never
crash a decoder or turn into a wrong value. (Request bodies from clients are checked strictly
instead, with 400s that name the field: `proxy.protocols.validation`.)
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any


def count(value: Any) -> int:
    """A token count or index: a positive integer, else 0 (booleans are not numbers here)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def obj(doc: Any, key: str) -> dict[str, Any]:
    """An object field; {} when missing or not an object."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}


def text(doc: Any, key: str) -> str:
    """A string field; "" when missing or not a string."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, str) else ""


def items(doc: Any, key: str) -> list[Any]:
    """A list field (content parts, summary parts, output items); [] when missing or not a list."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, list) else []


def objects(doc: Any, key: str) -> list[dict[str, Any]]:
    """The object entries of a list field (content blocks, output items); entries of any other
    type are skipped (use `items` where an entry's position counts)."""
    return [entry for entry in items(doc, key) if isinstance(entry, dict)]
