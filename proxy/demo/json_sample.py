"""Plausible JSON for a JSON schema: what the demo model puts in a tool call's arguments, and in an
answer a client asked to be JSON (`response_format`, `text.format`, `output_config.format`).

Owns `sample(schema)`: a value the schema accepts, as the schemas agent frameworks
send look — pydantic's (`$defs` and `$ref`, `anyOf` for optional fields, `enum`, `const`, formats
such as `date-time`), OpenAI strict schemas (every property required), plain tool schemas. Required
properties are filled (all of them when `required` is absent and the schema is strict); strings get
harmless values named after their property, numbers small ones within any bounds. Deterministic:
the same schema and seed give the same value, so tests can predict what a client gets.
"""

from __future__ import annotations

import json
from typing import Any

COMMAND = "echo hello from the llm-proxy demo"
_FORMATS = {"date-time": "2026-01-01T00:00:00Z", "date": "2026-01-01", "time": "00:00:00", "email": "demo@example.com",
            "uri": "https://example.com/demo", "uuid": "00000000-0000-4000-8000-000000000000"}


def sample(schema: Any, name: str = "value", seed: int = 0, root: Any = None) -> Any:
    """A value `schema` accepts (`name`: the property it is for, which some values are shaped by)."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return f"demo-{name}-{seed}"
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return sample(_resolve(ref, root), name, seed, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for combinator in ("anyOf", "oneOf"):
        options = [o for o in schema.get(combinator) or [] if isinstance(o, dict) and o.get("type") != "null"]
        if options:
            return sample(options[0], name, seed, root)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(_resolve(part["$ref"], root) if isinstance(part, dict) and "$ref" in part else part)
        return sample(merged, name, seed, root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None and "properties" in schema:
        kind = "object"
    if kind == "object":
        return properties(schema, name, seed, root)
    if kind == "array":
        if name in ("command", "cmd", "argv"):
            return ["bash", "-lc", COMMAND]
        count = max(1, int(schema.get("minItems") or 1))
        return [sample(schema.get("items") or {"type": "string"}, name, seed + i, root) for i in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = 1000 if "timeout" in name else max(seed + 1, int(low) + 1 if isinstance(low, int | float) else 0)
        high = schema.get("maximum")
        return min(value, int(high)) if isinstance(high, int | float) else value
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return _string(schema, name, seed)


def properties(schema: dict[str, Any], tool_name: str = "value", seed: int = 0, root: Any = None) -> dict[str, Any]:
    """An object for an object schema: its required properties (the first one if it names none and
    is not strict; every one if it is strict, as OpenAI's strict mode requires them all)."""
    root = schema if root is None else root
    props = schema.get("properties") or {}
    required = schema.get("required") or (list(props) if schema.get("additionalProperties") is False
                                          else list(props)[:1])
    return {prop: sample(props.get(prop) or {}, prop, seed, root) for prop in required}


def answer_for(response_format: Any, text: str) -> str | None:
    """The answer's text when a Chat `response_format` asks for JSON: a value of its schema, or for
    `json_object` an object carrying the answer's words; None when it asks for none."""
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_object":
        return json.dumps({"answer": text})
    if response_format.get("type") == "json_schema":
        wanted = response_format.get("json_schema") or {}
        return json.dumps(sample(wanted.get("schema") if isinstance(wanted, dict) else {}, "answer"))
    return None


def _string(schema: dict[str, Any], name: str, seed: int) -> str:
    if schema.get("format") in _FORMATS:
        return _FORMATS[schema["format"]]
    if name in ("command", "cmd", "script"):
        return COMMAND
    if name in ("city", "location"):
        return ["Paris", "Tokyo"][seed % 2]
    text = f"demo-{name}-{seed}"
    low = int(schema.get("minLength") or 0)
    return text + "x" * max(0, low - len(text))


def _resolve(ref: str, root: Any) -> Any:
    """A local `$ref` (`#/$defs/Name`, `#/definitions/Name`) within `root`; {} for anything else."""
    if not ref.startswith("#/"):
        return {}
    node = root
    for part in ref[2:].split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}
