"""Gemini field names as Google reads them: lowerCamelCase or snake_case, alike.

The API is protobuf's JSON mapping, which takes a field by its JSON name (`parametersJsonSchema`) or
its proto name (`parameters_json_schema`); google-genai (Python) sends some of each
(`functionDeclarations` with `parameters_json_schema` and `response_json_schema` in it). The proxy
reads one spelling: `camel_keys` rewrites a request's keys to lowerCamelCase once, at the edge,
leaving alone what is the client's own data rather than field names — function arguments and
results, JSON schemas (their property names), labels.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

# Fields whose value is data, not more of the request's fields: kept as they are, keys and all.
OPAQUE = frozenset({"args", "response", "parametersJsonSchema", "parameters", "responseJsonSchema",
                    "responseSchema", "labels", "metadata", "partialArgs"})


def camel(name: str) -> str:
    if "_" not in name:
        return name
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def camel_keys(value: Any) -> Any:
    """`value` with every field name in lowerCamelCase, data fields untouched (copies what changes)."""
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = camel(key) if isinstance(key, str) else key
        out[name] = item if name in OPAQUE else camel_keys(item)
    return out
