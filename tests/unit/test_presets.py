"""The OpenRouter preset spells every model as OpenRouter's catalogue lists it: each alias and rename
target is an id of the catalogue and each prefix a namespace of it (a dated copy of the catalogue's
ids, tests/fixtures/openrouter_models.json, taken from genai-prices' OpenRouter entries — OpenRouter
itself cannot be reached from here; tests/fixtures/update_openrouter_models.py refreshes it)."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.config.presets import OPENROUTER

CATALOGUE = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "openrouter_models.json").read_text())
IDS = set(CATALOGUE["ids"])


def test_every_alias_and_rename_targets_an_id_openrouter_lists() -> None:
    unknown = {name: target for name, target in {**OPENROUTER.aliases, **OPENROUTER.renames}.items()
               if target not in IDS}
    assert not unknown, f"not in OpenRouter's catalogue ({CATALOGUE['source']}, {CATALOGUE['taken']}): {unknown}"


def test_every_prefix_is_a_namespace_openrouter_uses() -> None:
    namespaces = {model.split("/", 1)[0] + "/" for model in IDS}
    assert not {rule: prefix for rule, prefix in OPENROUTER.prefixes.items() if prefix not in namespaces}


def test_the_names_clients_send_keep_the_vendors_dashes() -> None:
    """The aliases are what Claude Code and the SDKs send: dashed, never OpenRouter's dotted spelling."""
    claude = [name for name in OPENROUTER.aliases if name.startswith("claude-")]
    assert claude and all("." not in name for name in claude)
    assert OPENROUTER.aliases["claude-sonnet-4-6"] == "anthropic/claude-sonnet-4.6"
    assert OPENROUTER.prefixes["grok-*"] == "x-ai/"
