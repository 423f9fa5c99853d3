"""Ready-made model tables for an upstream's `models:` section (`preset: openrouter`), and how they
merge under the entries the config spells out.

Owns the data: for each preset, aliases (current model names clients send, listed in /v1/models),
renames (legacy names, accepted but not listed) and prefix rules (a vendor's names → the router's
`vendor/` namespace). Explicit entries win: a name the config aliases or renames drops the preset's
entry for it, and the config's prefix rules are tried before the preset's (a rule for the same
pattern replaces the preset's). Routing (`proxy.routing`) never knows a preset was used.
Import-light (stdlib only): the config imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    aliases: Mapping[str, str]
    renames: Mapping[str, str]
    prefixes: Mapping[str, str]  # glob pattern → prefix, tried in this order


# OpenRouter (an OpenAI-compatible router; model ids are `vendor/model`). Every target is spelled as
# OpenRouter's catalogue lists it — a Claude minor version with a dot (`anthropic/claude-sonnet-4.6`,
# `anthropic/claude-3.7-sonnet`), xAI under `x-ai/` — while the names clients send stay the vendors'
# own, dashes and all (tests/unit/test_presets.py holds every target to a dated copy of the
# catalogue's ids, tests/fixtures/openrouter_models.json).
OPENROUTER = Preset(
    aliases={
        # Claude: the names Claude Code and the Anthropic SDKs send.
        "claude-opus-5-5": "anthropic/claude-opus-5.5",
        "claude-opus-5": "anthropic/claude-opus-5",
        "claude-sonnet-5-5": "anthropic/claude-sonnet-5.5",
        "claude-sonnet-5": "anthropic/claude-sonnet-5",
        "claude-haiku-5-5": "anthropic/claude-haiku-5.5",
        "claude-fable-5-1": "anthropic/claude-fable-5.1",
        "claude-fable-5": "anthropic/claude-fable-5",
        "claude-sonnet-4-6": "anthropic/claude-sonnet-4.6",
        "claude-sonnet-4-5": "anthropic/claude-sonnet-4.5",
        "claude-opus-4-8": "anthropic/claude-opus-4.8",
        "claude-opus-4-7": "anthropic/claude-opus-4.7",
        "claude-opus-4-6": "anthropic/claude-opus-4.6",
        "claude-opus-4-5": "anthropic/claude-opus-4.5",
        "claude-opus-4-1": "anthropic/claude-opus-4.1",
        "claude-haiku-4-5": "anthropic/claude-haiku-4.5",
        # GPT and Gemini: the vendors' own names, which OpenRouter keeps under their namespace.
        "gpt-5.5": "openai/gpt-5.5",
        "gpt-5.4": "openai/gpt-5.4",
        "gpt-5.4-mini": "openai/gpt-5.4-mini",
        "gpt-5": "openai/gpt-5",
        "gpt-5-mini": "openai/gpt-5-mini",
        "gpt-4.1": "openai/gpt-4.1",
        "gpt-4o": "openai/gpt-4o",
        "gpt-4o-mini": "openai/gpt-4o-mini",
        "o3": "openai/o3",
        "o4-mini": "openai/o4-mini",
        "gemini-3.1-pro-preview": "google/gemini-3.1-pro-preview",
        "gemini-3-flash-preview": "google/gemini-3-flash-preview",
        "gemini-2.5-pro": "google/gemini-2.5-pro",
        "gemini-2.5-flash": "google/gemini-2.5-flash",
    },
    renames={
        # Claude 3.5 Sonnet is retired: its names go to its successor.
        "claude-3-5-sonnet-20241022": "anthropic/claude-sonnet-4.5",
        "claude-3-5-sonnet-20240620": "anthropic/claude-sonnet-4.5",
        "claude-3-5-sonnet-latest": "anthropic/claude-sonnet-4.5",
        # Dated and older spellings of models OpenRouter serves under one undated id.
        "claude-3-7-sonnet-20250219": "anthropic/claude-3.7-sonnet",
        "claude-3-7-sonnet-latest": "anthropic/claude-3.7-sonnet",
        "claude-3-5-haiku-20241022": "anthropic/claude-3.5-haiku",
        "claude-3-5-haiku-latest": "anthropic/claude-3.5-haiku",
        "claude-sonnet-4-20250514": "anthropic/claude-sonnet-4",
        "claude-sonnet-4-0": "anthropic/claude-sonnet-4",
        "claude-opus-4-20250514": "anthropic/claude-opus-4",
        "claude-opus-4-0": "anthropic/claude-opus-4",
        "claude-opus-4-1-20250805": "anthropic/claude-opus-4.1",
        "claude-sonnet-4-5-20250929": "anthropic/claude-sonnet-4.5",
        "claude-haiku-4-5-20251001": "anthropic/claude-haiku-4.5",
        "claude-opus-4-5-20251101": "anthropic/claude-opus-4.5",
    },
    prefixes={
        "claude-*": "anthropic/",
        "gpt-*": "openai/",
        "chatgpt-*": "openai/",
        "o1*": "openai/",
        "o3*": "openai/",
        "o4*": "openai/",
        "gemini-*": "google/",
        "gemma-*": "google/",
        "grok-*": "x-ai/",
        "deepseek-*": "deepseek/",
        "qwen*": "qwen/",
        "qwq-*": "qwen/",
        "mistral-*": "mistralai/",
        "codestral-*": "mistralai/",
        "devstral-*": "mistralai/",
        "llama-*": "meta-llama/",
        "kimi-*": "moonshotai/",
        "glm-*": "z-ai/",
    },
)

PRESETS: dict[str, Preset] = {"openrouter": OPENROUTER}


def merge(name: str, aliases: Mapping[str, str], renames: Mapping[str, str],
          prefixes: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """The preset `name` under the explicit aliases, renames and prefixes: (aliases, renames, prefixes)."""
    preset = PRESETS[name]
    explicit = {*aliases, *renames}
    merged_aliases = {**{k: v for k, v in preset.aliases.items() if k not in explicit}, **aliases}
    merged_renames = {**{k: v for k, v in preset.renames.items() if k not in explicit}, **renames}
    merged_prefixes = {**prefixes, **{k: v for k, v in preset.prefixes.items() if k not in prefixes}}
    return merged_aliases, merged_renames, merged_prefixes
