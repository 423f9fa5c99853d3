"""Prompt caching the proxy asks Anthropic upstreams for (`upstreams[].prompt_cache`), through a live
gunicorn + gevent proxy in front of the demo's Anthropic face, with the real openai and anthropic
SDKs: judged by what reached the upstream. A request whose client set no `cache_control` gets the
automatic one (`auto`, the default) — from a Messages, a Chat and a Responses client — or the two
block breakpoints (`breakpoints`), or nothing (`off`, and where the upstream lists `cache_control`
in `unsupported:`); a Messages client's own breakpoints reach the upstream exactly as sent, with
nothing added. The demo caches per account as Anthropic does, so the second identical request
reads its prompt from the cache: the client sees the saving in its usage."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.integration.upstreams import anthropic_client, only_request, openai_client, rid, words

EPHEMERAL = {"type": "ephemeral"}
# One account per upstream: the demo's cache is per account.
MODES = {"auto": {}, "marks": {"prompt_cache": "breakpoints"}, "off": {"prompt_cache": "off"},
         "nocc": {"unsupported": ["cache_control"]}}  # model claude-<mode>-… goes to upstream <mode>


@pytest.fixture(scope="module")
def modes_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    """One proxy with one Anthropic upstream per mode (all the same demo), chosen by the model name."""
    config = {"client_keys": [CLIENT_KEY], "upstreams": [
        {"name": mode, "protocol": "messages", "base_url": demo_upstream.url, "pool": {"probe": {"interval": 3600}},
         "models": {"serve": [f"claude-{mode}-*"]},
         "accounts": [{"id": f"{mode}-0", "api_key": f"sk-ant-{mode}-0001"}], **settings}
        for mode, settings in MODES.items()]}
    server = start_proxy(config, tmp_path_factory.mktemp("prompt-cache-modes"))
    yield server
    stop_proxy(server)


def long_system() -> str:
    """A system prompt past Anthropic's smallest cacheable prefix, unique to the test (the demo's
    cache lives as long as the test session)."""
    return f"[{uuid.uuid4()}] You are a careful assistant who answers briefly. " + "Project context line. " * 260


def markers(body: dict[str, Any]) -> list[str]:
    """Where the body carries `cache_control`: the top level, system blocks, message blocks (tool
    results' content too), tools."""
    found = ["top"] if "cache_control" in body else []
    system = body.get("system")
    found += [f"system[{i}]" for i, b in enumerate(system if isinstance(system, list) else []) if "cache_control" in b]
    for m, message in enumerate(body["messages"]):
        content = message["content"] if isinstance(message["content"], list) else []
        for i, block in enumerate(content):
            if "cache_control" in block:
                found.append(f"messages[{m}][{i}]")
            inner = block.get("content")
            found += [f"messages[{m}][{i}][{j}]" for j, b in enumerate(inner if isinstance(inner, list) else [])
                      if isinstance(b, dict) and "cache_control" in b]
    found += [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    return found


def sent_body(demo: DemoUpstream, request_id: str) -> dict[str, Any]:
    body: dict[str, Any] = only_request(demo, request_id, "/v1/messages")["body"]
    return body


# ------------------------------------------------------------ auto (the default)


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_client_without_cache_control_gets_automatic_caching_and_reads_its_prompt_back(
        modes_proxy: ProxyServer, demo_upstream: DemoUpstream, stream: bool) -> None:
    client = anthropic_client(modes_proxy)
    sent = {"max_tokens": 32, "system": long_system(),
            "messages": [{"role": "user", "content": "hi [demo:words=3] [demo:pace=0]"}]}
    usages = []
    for _ in range(2):  # the same request twice, on the one account
        request_id = rid()
        kwargs: dict[str, Any] = dict(model="claude-auto-1", extra_headers={"X-Request-Id": request_id}, **sent)
        if stream:
            with client.messages.stream(**kwargs) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(**kwargs)
        assert message.content[0].text == words(3)  # type: ignore[union-attr]
        body = sent_body(demo_upstream, request_id)
        # Everything the client sent, as it sent it, plus the one top-level field.
        assert body == {**sent, "model": "claude-auto-1", "cache_control": EPHEMERAL, **({"stream": True} if stream
                                                                                         else {})}
        usages.append(message.usage)
    first, second = usages
    assert first.cache_creation_input_tokens and first.cache_creation_input_tokens > 1024
    assert first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens  # the saving
    assert second.cache_creation_input_tokens == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_client_gets_automatic_caching_and_sees_the_cached_tokens(
        modes_proxy: ProxyServer, demo_upstream: DemoUpstream, stream: bool) -> None:
    oai = openai_client(modes_proxy)
    messages = [{"role": "system", "content": long_system()}, {"role": "user", "content": "hi [demo:words=4]"}]
    cached = []
    for _ in range(2):
        request_id = rid()
        kwargs: dict[str, Any] = dict(model="claude-auto-1", max_tokens=32, messages=messages,
                                      extra_headers={"X-Request-Id": request_id})
        if stream:
            with oai.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as s:
                completion = s.get_final_completion()
        else:
            completion = oai.chat.completions.create(**kwargs)
        assert completion.choices[0].message.content == words(4)
        body = sent_body(demo_upstream, request_id)
        assert body["cache_control"] == EPHEMERAL and markers(body) == ["top"]
        assert body["system"] == [{"type": "text", "text": messages[0]["content"]}]  # no block marked
        usage = completion.usage
        assert usage is not None and usage.prompt_tokens_details is not None
        cached.append(usage.prompt_tokens_details.cached_tokens)
    assert cached[0] == 0 and cached[1] and cached[1] > 1024


def test_a_responses_client_gets_automatic_caching(modes_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    answer = openai_client(modes_proxy).responses.create(
        model="claude-auto-1", instructions="Be brief.", input="hi [demo:words=2] [demo:pace=0]",
        extra_headers={"X-Request-Id": request_id})
    assert answer.output_text == words(2)
    body = sent_body(demo_upstream, request_id)
    assert body["cache_control"] == EPHEMERAL and markers(body) == ["top"]


# ------------------------------------------------------------ a client's own breakpoints


OWN: dict[str, Any] = {
    "max_tokens": 32,
    "system": [{"type": "text", "text": "Be brief."},
               {"type": "text", "text": "Stable instructions.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    "tools": [{"name": "get_weather", "description": "Weather",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
               "cache_control": EPHEMERAL}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?", "cache_control": EPHEMERAL}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01A", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "21 C"},
                                     {"type": "text", "text": "Thanks. [demo:words=2] [demo:pace=0]"}]}],
}


@pytest.mark.parametrize("mode", ["auto", "marks"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_clients_own_breakpoints_reach_the_upstream_untouched(
        modes_proxy: ProxyServer, demo_upstream: DemoUpstream, mode: str, stream: bool) -> None:
    request_id = rid()
    sent = copy.deepcopy(OWN)
    client = anthropic_client(modes_proxy)
    kwargs: dict[str, Any] = dict(model=f"claude-{mode}-1", extra_headers={"X-Request-Id": request_id}, **sent)
    if stream:
        with client.messages.stream(**kwargs) as s:
            s.get_final_message()
    else:
        client.messages.create(**kwargs)
    body = sent_body(demo_upstream, request_id)
    assert markers(body) == ["system[1]", "messages[0][0]", "tools[0]"]  # theirs, and nothing added
    for field in ("system", "tools", "messages"):  # byte for byte
        assert json.dumps(body[field]) == json.dumps(OWN[field]), field
    assert body == {**OWN, "model": f"claude-{mode}-1", **({"stream": True} if stream else {})}


def test_a_clients_own_top_level_cache_control_is_kept_as_sent(
        modes_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    anthropic_client(modes_proxy).messages.create(
        model="claude-marks-1", max_tokens=16, system="Be brief.", extra_headers={"X-Request-Id": request_id},
        extra_body={"cache_control": {"type": "ephemeral", "ttl": "1h"}},
        messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
    body = sent_body(demo_upstream, request_id)
    assert body["cache_control"] == {"type": "ephemeral", "ttl": "1h"} and markers(body) == ["top"]
    assert body["system"] == "Be brief."  # breakpoints mode marked nothing


# ------------------------------------------------------------ breakpoints, off, unsupported


def test_breakpoints_mark_the_last_system_block_and_the_last_block_of_the_final_message(
        modes_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    sent = copy.deepcopy(OWN)
    sent["system"] = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": long_system()}]
    sent["tools"][0].pop("cache_control")
    sent["messages"][0]["content"][0].pop("cache_control")
    usages = []
    for _ in range(2):
        request_id = rid()
        message = anthropic_client(modes_proxy).messages.create(model="claude-marks-1",
                                                                extra_headers={"X-Request-Id": request_id}, **sent)
        body = sent_body(demo_upstream, request_id)
        assert markers(body) == ["system[1]", "messages[2][1]"] and len(markers(body)) <= 4
        assert body["system"] == [sent["system"][0], {**sent["system"][1], "cache_control": EPHEMERAL}]
        assert body["messages"][2]["content"] == [sent["messages"][2]["content"][0],
                                                  {**sent["messages"][2]["content"][1], "cache_control": EPHEMERAL}]
        assert {k: v for k, v in body.items() if k not in ("system", "messages")} == \
            {**{k: v for k, v in sent.items() if k not in ("system", "messages")}, "model": "claude-marks-1"}
        usages.append(message.usage)
    assert usages[0].cache_creation_input_tokens and not usages[0].cache_read_input_tokens
    assert usages[1].cache_read_input_tokens == usages[0].cache_creation_input_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_breakpoints_for_a_chat_client(modes_proxy: ProxyServer, demo_upstream: DemoUpstream, stream: bool) -> None:
    request_id = rid()
    kwargs: dict[str, Any] = dict(model="claude-marks-1", max_tokens=16, extra_headers={"X-Request-Id": request_id},
                                  messages=[{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
    oai = openai_client(modes_proxy)
    if stream:
        with oai.chat.completions.stream(**kwargs) as s:
            s.get_final_completion()
    else:
        oai.chat.completions.create(**kwargs)
    body = sent_body(demo_upstream, request_id)
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "hi [demo:words=2] [demo:pace=0]", "cache_control": EPHEMERAL}]}]
    assert markers(body) == ["system[0]", "messages[0][0]"]


@pytest.mark.parametrize("mode", ["off", "nocc"])
def test_off_and_an_upstream_that_does_not_take_cache_control_get_nothing(
        modes_proxy: ProxyServer, demo_upstream: DemoUpstream, mode: str) -> None:
    plain = {"max_tokens": 16, "system": long_system(),
             "messages": [{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}]}
    for _ in range(2):
        request_id = rid()
        message = anthropic_client(modes_proxy).messages.create(
            model=f"claude-{mode}-1", extra_headers={"X-Request-Id": request_id}, **plain)
        assert sent_body(demo_upstream, request_id) == {**plain, "model": f"claude-{mode}-1"}
        assert not message.usage.cache_read_input_tokens and not message.usage.cache_creation_input_tokens
    request_id = rid()
    openai_client(modes_proxy).chat.completions.create(
        model=f"claude-{mode}-1", max_tokens=16, extra_headers={"X-Request-Id": request_id},
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi [demo:pace=0]"}])
    assert markers(sent_body(demo_upstream, request_id)) == []


def test_an_upstream_that_does_not_take_cache_control_gets_none_of_the_clients_either(
        modes_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    anthropic_client(modes_proxy).messages.create(model="claude-nocc-1", extra_headers={"X-Request-Id": request_id},
                                                  **copy.deepcopy(OWN))
    body = sent_body(demo_upstream, request_id)
    assert "cache_control" not in json.dumps(body) and markers(body) == []
