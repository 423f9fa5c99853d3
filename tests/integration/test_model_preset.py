"""`models: {preset: openrouter}` through a live proxy: /v1/models lists the preset's aliases to both
SDKs (next to the upstream's own models), and requests under an alias, a legacy name or a prefixed
vendor name reach the upstream under the router's name — an explicit entry in the config winning
over the preset's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.config.presets import OPENROUTER
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.integration.upstreams import anthropic_client, openai_client, rid, words


@pytest.fixture(scope="module")
def router_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    config = {"client_keys": [CLIENT_KEY], "upstreams": [{
        "name": "openrouter", "protocol": "chat_completions", "base_url": demo_upstream.url,
        "accounts": [{"id": "or-1", "api_key": "sk-or-v1-preset-0001"}],
        "models": {"preset": "openrouter", "aliases": {"claude-opus-4-6": "anthropic/claude-opus-4.6-fast"}}}]}
    server = start_proxy(config, Path(tmp_path_factory.mktemp("preset")))
    yield server
    stop_proxy(server)


def test_models_lists_the_preset_aliases_to_both_sdks(router_proxy: ProxyServer) -> None:
    openai_ids = [m.id for m in openai_client(router_proxy).models.list()]
    anthropic_ids = [m.id for m in anthropic_client(router_proxy).models.list()]
    assert openai_ids == anthropic_ids
    assert set(OPENROUTER.aliases) <= set(openai_ids)  # claude-sonnet-4-6, gpt-5, gemini-2.5-pro, …
    assert "demo-model" in openai_ids  # the upstream's own list is still merged in
    assert not set(OPENROUTER.renames) & set(openai_ids)  # legacy names are accepted, not listed


@pytest.mark.parametrize(("client_model", "upstream_model"), [
    ("claude-3-5-sonnet-20241022", "anthropic/claude-sonnet-4.5"),  # legacy rename
    ("claude-sonnet-4-6", "anthropic/claude-sonnet-4.6"),  # alias, spelled as OpenRouter lists it
    ("grok-4", "x-ai/grok-4"),  # prefix
    ("claude-opus-4-6", "anthropic/claude-opus-4.6-fast"),  # the config's own alias wins
])
def test_a_request_reaches_the_upstream_under_the_routers_name(router_proxy: ProxyServer, demo_upstream: DemoUpstream,
                                                               client_model: str, upstream_model: str) -> None:
    request_id = rid()
    message = anthropic_client(router_proxy).messages.create(
        model=client_model, max_tokens=20, messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}],
        extra_headers={"X-Request-Id": request_id})
    assert message.model == client_model and message.content[0].text == words(2)  # type: ignore[union-attr]
    (record,) = demo_upstream.requests(request_id)
    assert record["body"]["model"] == upstream_model
