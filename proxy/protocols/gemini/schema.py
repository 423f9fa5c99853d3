"""JSON Schema reduced to the OpenAPI subset Gemini's older `parameters` field takes (the Schema
object of ai.google.dev/api/caching#Schema): for upstreams configured `tool_schema: openapi`.

`parametersJsonSchema` takes JSON Schema as the client wrote it and is what the proxy sends by
default; `parameters` refuses what is not in the subset with a 400. Each rule, and why:
- `$ref` is inlined from `$defs` / `definitions` (the subset has no references); a reference back
  into itself (a recursive schema) is cut to an object with no properties.
- `$schema`, `$id`, `$comment`, `$defs`, `definitions`, `additionalProperties`, `patternProperties`,
  `unevaluatedProperties`, `dependentRequired`, `examples`, `default`, `const`, `not`, `if` / `then` /
  `else`, `contentEncoding`, `contentMediaType`, `readOnly`, `writeOnly`, `deprecated` are not fields
  of the Schema object: dropped — `const: x` first becomes `enum: [x]`, which is.
- `exclusiveMinimum` / `exclusiveMaximum` (numbers in JSON Schema) become `minimum` / `maximum`.
- `type: [t, "null"]` becomes `type: t` + `nullable: true`; an `anyOf` / `oneOf` with a
  `{"type": "null"}` branch loses the branch and becomes nullable (a single branch left is inlined).
- `oneOf` becomes `anyOf` (the subset has only `anyOf`); `allOf` of objects is merged.
- `enum` values are strings in the subset: other values are written as strings.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

DROPPED = frozenset({"$schema", "$id", "$comment", "$defs", "definitions", "additionalProperties",
                     "patternProperties", "unevaluatedProperties", "dependentRequired", "dependentSchemas",
                     "examples", "default", "const", "not", "if", "then", "else", "contentEncoding",
                     "contentMediaType", "readOnly", "writeOnly", "deprecated", "$anchor"})


def openapi_subset(schema: Any) -> Any:
    """`schema` as the OpenAPI subset takes it (a copy)."""
    if not isinstance(schema, dict):
        return schema
    defs = {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}
    return _reduce(schema, defs if isinstance(defs, dict) else {}, ())


def _reduce(node: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_reduce(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in seen or name not in defs:
            return {"type": "object"}  # recursive (or unknown): cut here
        merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _reduce(merged, defs, (*seen, name))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROPPED:
            continue
        if key in ("properties",) and isinstance(value, dict):
            out[key] = {name: _reduce(sub, defs, seen) for name, sub in value.items()}
        elif key in ("items", "anyOf", "oneOf", "allOf"):
            out[key] = _reduce(value, defs, seen)
        else:
            out[key] = value
    if "const" in node and "enum" not in out:
        out["enum"] = [node["const"]]
    if "enum" in out and isinstance(out["enum"], list):
        out["enum"] = [_enum_value(v) for v in out["enum"]]
    for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(exclusive), int | float) and not isinstance(out[exclusive], bool):
            out.setdefault(inclusive, out.pop(exclusive))
        else:
            out.pop(exclusive, None)
    if isinstance(out.get("type"), list):
        types = [t for t in out["type"] if t != "null"]
        if len(types) < len(out["type"]):
            out["nullable"] = True
        out["type"] = types[0] if len(types) == 1 else "string" if not types else types[0]
    if "oneOf" in out:
        out["anyOf"] = out.pop("oneOf")
    if isinstance(out.get("anyOf"), list):
        branches = [b for b in out["anyOf"] if not (isinstance(b, dict) and b.get("type") == "null")]
        if len(branches) < len(out["anyOf"]):
            out["nullable"] = True
        if len(branches) == 1 and isinstance(branches[0], dict):
            rest = {k: v for k, v in out.items() if k != "anyOf"}
            out = {**branches[0], **rest}
        else:
            out["anyOf"] = branches
    if isinstance(out.get("allOf"), list):
        out = _merge_all_of(out)
    return out


def _enum_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return str(value).lower() if isinstance(value, bool) else str(value)


def _merge_all_of(node: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in node.items() if k != "allOf"}
    for part in node["allOf"]:
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if key == "properties" and isinstance(value, dict):
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required" and isinstance(value, list):
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged
