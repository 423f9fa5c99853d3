"""Model routing rules and the client-key check."""

from __future__ import annotations

from typing import Any

from proxy.auth import KeyChecker, presented_key
from proxy.config import parse
from proxy.routing import Router


def config(*upstreams: dict[str, Any]) -> Any:
    ups = [{"name": f"u{i}", "protocol": "openai", "base_url": "http://x/v1",
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
