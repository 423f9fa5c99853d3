"""The `tracing:` section: what the loader refuses, and a config asking for tracing without the
`otel` extra installed refused by the config check, naming the extra to install."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.config.tracing import parse_tracing
from proxy.config.values import ConfigError


def test_the_section_refuses_what_cannot_work() -> None:
    with pytest.raises(ConfigError, match="base URL"):
        parse_tracing({"endpoint": "otel-collector:4318"})
    with pytest.raises(ConfigError, match="fraction"):
        parse_tracing({"sample": 2})
    assert parse_tracing({"endpoint": "http://c:4318/"}).endpoint == "http://c:4318"


def test_tracing_without_the_otel_extra_is_a_config_error_naming_the_extra(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from proxy.serving import config_check

    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"client_keys": ["sk-c"], "tracing": {"enabled": True},
                                "upstreams": [{"name": "u", "protocol": "chat_completions", "base_url": "http://u/v1",
                                               "accounts": [{"id": "a", "api_key": "sk-a"}]}]}))
    assert config_check.checked(str(path)).tracing.enabled  # installed here: the test extra brings it
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("opentelemetry") else real(name, *a))
    with pytest.raises(ConfigError, match=r"llm-proxy\[otel\]"):
        config_check.checked(str(path))


def test_an_upstream_is_named_by_its_host_when_the_host_is_a_known_provider() -> None:
    from proxy.protocols.providers import provider_at

    assert provider_at("api.deepseek.com", "openai") == "deepseek"
    assert provider_at("myres.openai.azure.com", "openai") == "azure.ai.openai"
    assert provider_at("127.0.0.1", "anthropic") == "anthropic"  # anything else: the API it speaks
    assert provider_at("evil-api.deepseek.com.example", "openai") == "openai"
