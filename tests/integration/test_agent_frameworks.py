"""The Python agent frameworks teams build with, driven against a live proxy through each client
protocol over each upstream protocol: pydantic-ai (its OpenAI Chat, OpenAI Responses and Anthropic
models) and LangChain (`ChatOpenAI`, with and without `use_responses_api`, and `ChatAnthropic`).
For each: a two-step dependent tool chain, structured output (each framework's tool mode and its
native JSON mode), an image input, and usage — what the framework reports equals what the proxy
counted for the same requests (`/admin/requests`, by request id), which is what the upstream said.
What reached the upstream is read back from the demo upstream (`/_demo/requests`): the schema in the
upstream protocol's own form, the image as that protocol's image part.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer
from tests.integration.test_pool import ADMIN_KEY, admin
from tests.integration.upstreams import proxy_speaking

UPSTREAMS = ("chat_completions", "messages", "responses")
CLIENTS = ("pydantic_ai_chat", "pydantic_ai_responses", "pydantic_ai_anthropic", "langchain_chat",
           "langchain_responses", "langchain_anthropic")
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==")
CHAIN_PROMPT = "look it up, step by step [demo:chain=2] [demo:pace=0]"


class Weather(BaseModel):
    city: str
    temperature: float


@pytest.fixture(scope="module", params=UPSTREAMS)
def proxy_over(request: pytest.FixtureRequest, demo_upstream: DemoUpstream,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ProxyServer]]:
    with proxy_speaking(request.param, demo_upstream, tmp_path_factory.mktemp(f"frameworks-{request.param}"), admin_keys=[ADMIN_KEY]) as server:
        yield request.param, server


# ------------------------------------------------------------------ the clients


class Client:
    """One framework's model: `chain`, `structured(mode)` and `image` return (answer, usage) where
    usage is (input tokens, output tokens) as the framework reports it."""

    def __init__(self, name: str, proxy: ProxyServer, rid: str) -> None:
        self.name, self.proxy, self.rid = name, proxy, rid
        self.calls: list[str] = []

    def lookup(self, key: str) -> str:
        """Look a key up."""
        self.calls.append(key)
        return f"value-{len(self.calls)}"

    # pydantic-ai -----------------------------------------------------------------------------

    def _pydantic_model(self) -> Any:
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
        from pydantic_ai.providers.anthropic import AnthropicProvider
        from pydantic_ai.providers.openai import OpenAIProvider

        if self.name == "pydantic_ai_anthropic":  # a Claude name: its profile has native structured output
            return AnthropicModel("claude-sonnet-4-6", provider=AnthropicProvider(base_url=self.proxy.url,
                                                                                  api_key=CLIENT_KEY))
        kind = OpenAIResponsesModel if self.name == "pydantic_ai_responses" else OpenAIChatModel
        return kind("demo-model", provider=OpenAIProvider(base_url=f"{self.proxy.url}/v1", api_key=CLIENT_KEY))

    def _pydantic(self, prompt: Any, output: Any = str, tools: bool = False) -> tuple[Any, tuple[int, int]]:
        from pydantic_ai import Agent

        agent = Agent(self._pydantic_model(), output_type=output,
                      model_settings={"extra_headers": {"X-Request-Id": self.rid}}, retries=0)
        if tools:
            agent.tool_plain(self.lookup)
        result = agent.run_sync(prompt)
        return result.output, (result.usage.input_tokens, result.usage.output_tokens)

    # LangChain -------------------------------------------------------------------------------

    def _langchain_model(self) -> Any:
        from langchain_anthropic import ChatAnthropic
        from langchain_openai import ChatOpenAI

        headers = {"X-Request-Id": self.rid}
        if self.name == "langchain_anthropic":
            return ChatAnthropic(model="claude-sonnet-4-6", base_url=self.proxy.url, api_key=CLIENT_KEY, max_retries=0,
                                 default_headers=headers)
        return ChatOpenAI(model="demo-model", base_url=f"{self.proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0,
                          default_headers=headers, use_responses_api=self.name == "langchain_responses")

    def _langchain_chain(self) -> tuple[str, tuple[int, int]]:
        from langchain_core.messages import HumanMessage, ToolMessage
        from langchain_core.tools import tool

        lookup = tool(self.lookup)
        model = self._langchain_model().bind_tools([lookup])
        messages: list[Any] = [HumanMessage(CHAIN_PROMPT)]
        used = [0, 0]
        for _ in range(4):
            answer = model.invoke(messages)
            messages.append(answer)
            used[0] += answer.usage_metadata["input_tokens"]
            used[1] += answer.usage_metadata["output_tokens"]
            if not answer.tool_calls:
                return str(answer.text), (used[0], used[1])
            for call in answer.tool_calls:
                messages.append(ToolMessage(lookup.invoke(call["args"]), tool_call_id=call["id"]))
        raise AssertionError("the chain did not end")

    # the scenarios -----------------------------------------------------------------------------

    def chain(self) -> tuple[str, tuple[int, int]]:
        if self.name.startswith("pydantic_ai"):
            return self._pydantic(CHAIN_PROMPT, tools=True)
        return self._langchain_chain()

    def structured(self, mode: str) -> Any:
        prompt = "the weather in Paris, please [demo:pace=0]"
        if self.name.startswith("pydantic_ai"):
            from pydantic_ai import NativeOutput

            return self._pydantic(prompt, Weather if mode == "tool" else NativeOutput(Weather))[0]
        method = "function_calling" if mode == "tool" else "json_schema"
        return self._langchain_model().with_structured_output(Weather, method=method).invoke(prompt)

    def image(self) -> tuple[str, tuple[int, int]]:
        prompt = "what is in this image? [demo:pace=0]"
        if self.name.startswith("pydantic_ai"):
            from pydantic_ai import BinaryContent

            output, usage = self._pydantic([prompt, BinaryContent(data=PNG, media_type="image/png")])
            return str(output), usage
        from langchain_core.messages import HumanMessage

        answer = self._langchain_model().invoke([HumanMessage(content=[
            {"type": "text", "text": prompt},
            {"type": "image", "base64": base64.b64encode(PNG).decode(), "mime_type": "image/png"}])])
        return str(answer.text), (answer.usage_metadata["input_tokens"], answer.usage_metadata["output_tokens"])


def counted(proxy: ProxyServer, rid: str) -> tuple[int, int]:
    """What the proxy counted for the requests of `rid`: (input tokens, output tokens)."""
    status, body = admin(proxy, "GET", "/admin/requests?limit=200")
    assert status == 200
    mine = [r for r in body["data"] if r["request_id"] == rid]
    assert mine, f"no request {rid} in /admin/requests"
    return sum(r["input_tokens"] for r in mine), sum(r["output_tokens"] for r in mine)


def sent(demo: DemoUpstream, rid: str) -> list[dict[str, Any]]:
    return [r["body"] for r in demo.requests(rid)]


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest, proxy_over: tuple[str, ProxyServer]) -> Client:
    return Client(request.param, proxy_over[1], f"fw-{uuid.uuid4().hex}")


# ------------------------------------------------------------------ the tests


def test_a_dependent_tool_chain_runs_to_its_answer(client: Client, demo_upstream: DemoUpstream) -> None:
    answer, usage = client.chain()
    assert client.calls == ["step1", "value-1 step2"]  # the second call used the first one's result
    assert "value-1 | value-2" in answer
    assert usage == counted(client.proxy, client.rid)
    assert len(sent(demo_upstream, client.rid)) == 3


@pytest.mark.parametrize("mode", ["tool", "native"])
def test_structured_output_comes_back_parsed(client: Client, proxy_over: tuple[str, ProxyServer],
                                             demo_upstream: DemoUpstream, mode: str) -> None:
    assert client.structured(mode) == Weather(city="Paris", temperature=1.0)
    (body,) = sent(demo_upstream, client.rid)
    schema = schema_sent(proxy_over[0], body, mode)
    assert schema is not None and set(schema["properties"]) == {"city", "temperature"}, body


def schema_sent(upstream: str, body: dict[str, Any], mode: str) -> dict[str, Any] | None:
    """The schema as the upstream got it: a forced tool's parameters, or the protocol's JSON mode."""
    if mode == "tool":
        tools = body.get("tools") or []
        return next((t.get("input_schema") or t.get("parameters") or (t.get("function") or {}).get("parameters")
                     for t in tools), None)
    if upstream == "chat_completions":
        return body["response_format"]["json_schema"]["schema"]  # type: ignore[no-any-return]
    if upstream == "responses":
        return body["text"]["format"]["schema"]  # type: ignore[no-any-return]
    fmt = (body.get("output_config") or {}).get("format") or body.get("output_format") or {}
    return fmt.get("schema")  # type: ignore[no-any-return]


def test_an_image_reaches_the_upstream_as_its_own_image_part(client: Client, proxy_over: tuple[str, ProxyServer],
                                                             demo_upstream: DemoUpstream) -> None:
    answer, usage = client.image()
    assert answer.startswith("Hello from the llm-proxy demo upstream.")
    assert usage == counted(client.proxy, client.rid)
    (body,) = sent(demo_upstream, client.rid)
    data = base64.b64encode(PNG).decode()
    assert image_parts(proxy_over[0], body) == [data]


def image_parts(upstream: str, body: dict[str, Any]) -> list[str]:
    """The base64 data of every image in the request, read the way the upstream protocol carries it."""
    found: list[str] = []
    walk: Callable[[Any], None]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            kind = node.get("type")
            if upstream == "chat_completions" and kind == "image_url":
                found.append(node["image_url"]["url"].removeprefix("data:image/png;base64,"))
            elif upstream == "messages" and kind == "image":
                found.append(node["source"]["data"])
            elif upstream == "responses" and kind == "input_image":
                found.append(str(node["image_url"]).removeprefix("data:image/png;base64,"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(body.get("messages") or body.get("input"))
    return found
