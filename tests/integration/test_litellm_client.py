"""litellm used as a client, as teams do (`litellm.completion(model="anthropic/…", api_base=<the
proxy>, response_format=PydanticModel)`): litellm 1.110 sends Anthropic's structured-outputs beta —
a top-level `output_format` and `anthropic-beta: structured-outputs-2025-11-13` — and the answer
must parse as the model, streamed and not, over every upstream protocol. An Anthropic upstream gets
the body and the beta header as sent; a Chat one gets `response_format` json_schema, a Responses one
`text.format`. litellm runs offline here: its remote catalogues are switched off before it loads."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer
from tests.integration.upstreams import proxy_speaking

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")  # no fetch of its model map or beta-header list
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "true")


class Weather(BaseModel):
    city: str
    temperature: float


@pytest.fixture(scope="module", params=["chat_completions", "messages", "responses"])
def proxy_over(request: pytest.FixtureRequest, demo_upstream: DemoUpstream,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ProxyServer]]:
    with proxy_speaking(request.param, demo_upstream, tmp_path_factory.mktemp(f"litellm-{request.param}")) as server:
        yield request.param, server


@pytest.mark.parametrize("stream", [False, True])
def test_response_format_on_a_claude_model_comes_back_as_the_model(proxy_over: tuple[str, ProxyServer],
                                                                   demo_upstream: DemoUpstream, stream: bool) -> None:
    import litellm

    upstream, proxy = proxy_over
    rid = f"litellm-{uuid.uuid4().hex}"
    answer: Any = litellm.completion(
        model="anthropic/claude-sonnet-4-6", api_base=proxy.url, api_key=CLIENT_KEY, stream=stream,
        messages=[{"role": "user", "content": "the weather in Paris [demo:pace=0]"}], response_format=Weather,
        extra_headers={"X-Request-Id": rid}, num_retries=0)
    text = "".join(c.choices[0].delta.content or "" for c in answer) if stream else answer.choices[0].message.content
    assert Weather.model_validate_json(text) == Weather(city="Paris", temperature=1.0)
    (record,) = demo_upstream.requests(rid)
    body = record["body"]
    if upstream == "messages":  # passed through: the beta's field and header as litellm sent them
        assert body["output_format"]["type"] == "json_schema" and "output_config" not in body
        assert "structured-outputs-2025-11-13" in record["headers"].get("anthropic-beta", "")
        schema = body["output_format"]["schema"]
    elif upstream == "chat_completions":
        assert body["response_format"]["type"] == "json_schema"
        schema = body["response_format"]["json_schema"]["schema"]
    else:
        assert body["text"]["format"]["type"] == "json_schema"
        schema = body["text"]["format"]["schema"]
    assert schema["required"] == ["city", "temperature"]
