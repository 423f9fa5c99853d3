"""Model routing rules and the client-key check."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.blueprints.auth import KeyChecker, presented_key
from proxy.config import ConfigError, parse
from proxy.routing import Router


def config(*upstreams: dict[str, Any]) -> Any:
    ups = [{"name": f"u{i}", "protocol": "chat_completions", "base_url": "http://x/v1",
            "accounts": [{"id": "a", "api_key": "k"}], **u} for i, u in enumerate(upstreams)]
    return parse({"client_keys": ["c"], "upstreams": ups})


def routes(cfg: Any, model: str) -> list[tuple[str, str]]:
    return [(r.upstream.name, r.model) for r in Router(cfg.upstreams).resolve(model)]


def test_everything_is_served_as_is_when_nothing_is_configured() -> None:
    assert routes(config({}), "gpt-4o") == [("u0", "gpt-4o")]


def test_aliases_renames_and_prefixes() -> None:
    cfg = config({"models": {
        "serve": ["claude-*", "gpt-*", "gemini-*", "grok-*"],
        "aliases": {"claude-sonnet-4-6": "anthropic/claude-sonnet-4-6"},
        "renames": {"claude-3-5-sonnet-20241022": "anthropic/claude-sonnet-4-5"},
        "prefixes": {"claude-*": "anthropic/", "gpt-*": "openai/", "gemini-*": "google/", "grok-*": "xai/"},
    }})
    assert routes(cfg, "claude-sonnet-4-6") == [("u0", "anthropic/claude-sonnet-4-6")]
    assert routes(cfg, "claude-3-5-sonnet-20241022") == [("u0", "anthropic/claude-sonnet-4-5")]
    assert routes(cfg, "claude-opus-4-1") == [("u0", "anthropic/claude-opus-4-1")]
    assert routes(cfg, "gpt-5") == [("u0", "openai/gpt-5")]
    assert routes(cfg, "grok-4") == [("u0", "xai/grok-4")]
    assert routes(cfg, "llama-3") == []


def test_a_model_goes_to_every_upstream_that_serves_it_in_config_order() -> None:
    cfg = config({"models": {"serve": ["gpt-*"]}}, {"models": {"serve": ["claude-*"]}}, {})
    assert routes(cfg, "gpt-4o") == [("u0", "gpt-4o"), ("u2", "gpt-4o")]
    assert routes(cfg, "claude-x") == [("u1", "claude-x"), ("u2", "claude-x")]
    assert routes(cfg, "other") == [("u2", "other")]


def test_alias_on_an_upstream_serves_the_name_even_outside_its_patterns() -> None:
    cfg = config({"models": {"serve": ["gpt-*"], "aliases": {"fast": "gpt-4o-mini"}}})
    assert routes(cfg, "fast") == [("u0", "gpt-4o-mini")]


def test_the_openrouter_preset_gives_the_documented_table() -> None:
    cfg = config({"models": {"preset": "openrouter"}})
    assert routes(cfg, "claude-sonnet-4-6") == [("u0", "anthropic/claude-sonnet-4.6")]  # alias, OpenRouter's spelling
    assert routes(cfg, "claude-3-5-sonnet-20241022") == [("u0", "anthropic/claude-sonnet-4.5")]  # legacy rename
    assert routes(cfg, "claude-haiku-6") == [("u0", "anthropic/claude-haiku-6")]  # prefix rules
    assert routes(cfg, "gpt-6") == [("u0", "openai/gpt-6")]
    assert routes(cfg, "gemini-4-pro") == [("u0", "google/gemini-4-pro")]
    assert routes(cfg, "grok-5") == [("u0", "x-ai/grok-5")]
    assert routes(cfg, "o3-pro") == [("u0", "openai/o3-pro")]
    assert routes(cfg, "deepseek-chat") == [("u0", "deepseek/deepseek-chat")]
    assert routes(cfg, "qwen3-coder") == [("u0", "qwen/qwen3-coder")]
    assert routes(cfg, "mistral-large") == [("u0", "mistralai/mistral-large")]
    assert routes(cfg, "anthropic/claude-opus-4.6") == [("u0", "anthropic/claude-opus-4.6")]  # already the router's
    assert routes(cfg, "my-own-model") == [("u0", "my-own-model")]
    rules = cfg.upstreams[0].models
    assert rules.preset == "openrouter" and "claude-sonnet-4-6" in rules.aliases
    assert "claude-3-5-sonnet-20241022" not in rules.aliases  # legacy names are accepted, not listed


def test_explicit_entries_win_over_the_preset() -> None:
    cfg = config({"models": {
        "preset": "openrouter",
        "aliases": {"claude-3-5-sonnet-20241022": "anthropic/claude-3.5-sonnet", "house": "meta-llama/llama-4"},
        "renames": {"claude-sonnet-4-6": "anthropic/claude-sonnet-4.6"},
        "prefixes": {"grok-*": "xai/", "claude-haiku-*": "anthropic-beta/"},
    }})
    assert routes(cfg, "claude-3-5-sonnet-20241022") == [("u0", "anthropic/claude-3.5-sonnet")]
    assert routes(cfg, "claude-sonnet-4-6") == [("u0", "anthropic/claude-sonnet-4.6")]
    assert routes(cfg, "house") == [("u0", "meta-llama/llama-4")]
    assert routes(cfg, "grok-5") == [("u0", "xai/grok-5")]
    assert routes(cfg, "claude-haiku-6") == [("u0", "anthropic-beta/claude-haiku-6")]  # tried before the preset's
    assert routes(cfg, "claude-opus-4-6") == [("u0", "anthropic/claude-opus-4.6")]  # the rest of the preset stays
    rules = cfg.upstreams[0].models
    assert "claude-sonnet-4-6" not in rules.aliases  # renamed explicitly: no longer listed


def test_an_unknown_preset_is_a_config_error_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        config({"models": {"preset": "openrouterr"}})
    assert caught.value.path == "upstreams[0].models.preset"
    assert caught.value.problem == "must be one of openrouter (got 'openrouterr')"


def test_presented_key_prefers_x_api_key_then_bearer() -> None:
    assert presented_key("k1", "Bearer k2") == "k1"
    assert presented_key(None, "Bearer k2") == "k2"
    assert presented_key(None, "bearer  k3 ") == "k3"
    assert presented_key(None, "Basic abc") is None
    assert presented_key("", None) is None


def test_key_checker() -> None:
    checker = KeyChecker(["sk-a", "sk-b"])
    assert checker.check("sk-a") and checker.check("sk-b")
    assert not checker.check("sk-c") and not checker.check(None) and not checker.check("")
    assert not KeyChecker([]).check("anything")
