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


def test_the_server_span_names_the_model_that_served_only_when_a_fallback_did(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from proxy.config.tracing import TracingConfig
    from proxy.ops import tracing
    from proxy.ops.records import Arrival, RequestRecord

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_providers_for", lambda config: (provider, None))
    hook = tracing.Tracing(TracingConfig(enabled=True), lambda protocol: "openai")
    for request_id, served in (("r1", "claude-sonnet-4-6"), ("r2", None)):
        record = RequestRecord(request_id, "alice", "messages", "claude-opus-4-6", False, endpoint="messages",
                               served_model=served)
        hook.request_arrived(record, Arrival("POST", "/v1/messages", "", {}, lambda: b""))
        record.finish(200, "ok")
        hook.request_done(record)
    fell_back, plain = exporter.get_finished_spans()
    assert fell_back.attributes is not None and plain.attributes is not None
    assert fell_back.attributes["llm_proxy.served_model"] == "claude-sonnet-4-6"
    assert fell_back.attributes["gen_ai.request.model"] == "claude-opus-4-6"
    assert "llm_proxy.served_model" not in plain.attributes
