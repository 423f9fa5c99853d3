"""The config file described once: every key, its type, default and meaning — as a reference page
and as a JSON Schema.

Owns the two things made from `SPEC` (`proxy.config.spec`, the one description of the YAML the
loader accepts): the Markdown reference (docs/configuration-reference.md)
and a JSON Schema, draft 2020-12 (docs/config.schema.json, printed by `llm-proxy config-schema`),
for editors that validate YAML. The schema is closed wherever the loader is — an unknown key is an
error in both — and open where the loader takes names of the user's choosing (headers, aliases).
tests/test_config_reference.py holds `SPEC` to the loader: at every section the keys it lists are
exactly the keys the loader knows, each default it states is the one the loader applies, and the
committed page and schema are what this module makes now. Regenerate both with

    python -m proxy.config.reference --markdown > docs/configuration-reference.md
    python -m proxy.config.reference --schema > docs/config.schema.json

`${VAR}` and `${VAR:-default}` (read from the environment when the file is loaded) are accepted by
the schema wherever a string or a number is. Import-light: stdlib only, like `proxy.config`.
"""
from __future__ import annotations

import json
import sys

from proxy.config.spec import SPEC
from proxy.config.spec_parts import ENV, STRING, Key, Schema, Section

__all__ = ["SPEC", "Key", "Schema", "Section", "markdown", "rows", "schema", "schema_text"]


# ---------------------------------------------------------------- the JSON Schema


def schema() -> Schema:
    """The config file's JSON Schema (draft 2020-12), closed where the loader is."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "llm-proxy configuration",
        "description": "The YAML file given to `llm-proxy serve --config` (see docs/configuration-reference.md).",
        **_section_schema(SPEC),
    }


def _section_schema(section: Section) -> Schema:
    out: Schema = {"type": "object", "additionalProperties": False,
                   "properties": {key.name: _key_schema(key) for key in section.keys}}
    required = [key.name for key in section.keys if key.required]
    if required:
        out["required"] = required
    if section.or_string is None:
        return out
    return {"anyOf": [{**STRING, "description": section.or_string}, out]}


def _key_schema(key: Key) -> Schema:
    one = _section_schema(key.value) if isinstance(key.value, Section) else key.value
    if key.listed is None:
        value = one
    else:
        listed: Schema = {"type": "array", "items": one}
        if key.required:
            listed["minItems"] = 1
        value = listed if key.listed == "list" else {"anyOf": [one, listed]}
    return {**value, "description": _plain(key.meaning)}


def _plain(text: str) -> str:
    """A meaning without the Markdown links editors would show raw."""
    out, rest = [], text
    while "](" in rest:
        head, _, tail = rest.partition("](")
        label_start = head.rfind("[")
        out.append(head[:label_start] + head[label_start + 1:])
        rest = tail.partition(")")[2]
    return "".join(out) + rest


# ---------------------------------------------------------------- the reference page


def rows(section: Section = SPEC, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key path, type, default, meaning) for every key, depth first, in the order the spec gives."""
    found = []
    for key in section.keys:
        path = prefix + key.name + ("[]" if key.listed else "")
        found.append((path, _kind(key), key.default, key.meaning + (" Required." if key.required else "")))
        if isinstance(key.value, Section):
            found += rows(key.value, path + ".")
    return found


def _kind(key: Key) -> str:
    if isinstance(key.value, Section):
        one = "mapping" if key.value.or_string is None else "string or mapping"
    else:
        one = _schema_kind(key.value)
    if key.listed == "list":
        return f"list of {one}s"
    return f"{one}, or a list" if key.listed == "list_or_one" else one


def _schema_kind(s: Schema) -> str:
    if "anyOf" in s:
        kinds = [_schema_kind(part) for part in s["anyOf"] if part is not ENV]
        if len(s["anyOf"]) == 2 and s["anyOf"][1].get("type") == "array":
            return f"{kinds[0]}, or a list"
        return " or ".join(dict.fromkeys(kinds))
    if "enum" in s:
        # A non-string value as YAML writes it (`off` is read as false).
        return " \\| ".join(f"`{v if isinstance(v, str) else json.dumps(v)}`" for v in s["enum"])
    kind = s.get("type")
    if kind == "object":
        return "mapping"
    if kind == "array":
        return "list of " + _schema_kind(s["items"]) + "s"
    if isinstance(kind, list):
        return " or ".join(kind)
    return {"number": "number", "integer": "whole number", "string": "string", "boolean": "boolean"}.get(
        str(kind), str(kind))


def markdown() -> str:
    """The reference page: one table of every key."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m proxy.config.reference --markdown` from proxy/config/reference.py;",
        "     do not edit by hand (tests/test_config_reference.py checks it is current). -->",
        "",
        "Every key the config file takes, its type, its default and what it does. An unknown key is an error "
        "(the loader names it), so a typo never passes silently. Any string or number may be written as "
        "`${VAR}` or `${VAR:-default}`, read from the environment when the file is loaded. `key[]` is a list "
        "of entries with the keys listed below it.",
        "",
        "The same description as a JSON Schema, for editors that validate YAML: "
        "[config.schema.json](config.schema.json), also printed by `llm-proxy config-schema`. With the YAML "
        "language server, put `# yaml-language-server: $schema=config.schema.json` (a path or URL to it) at "
        "the top of the config file.",
        "",
        "| Key | Type | Default | Meaning |",
        "|---|---|---|---|",
    ]
    for path, kind, default, meaning in rows():
        cell = meaning.replace("|", "\\|")
        lines.append(f"| `{path}` | {kind} | {default} | {cell} |")
    return "\n".join(lines) + "\n"


def schema_text() -> str:
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--markdown"]:
        sys.stdout.write(markdown())
    elif args == ["--schema"]:
        sys.stdout.write(schema_text())
    else:
        sys.stderr.write("usage: python -m proxy.config.reference --markdown | --schema\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
