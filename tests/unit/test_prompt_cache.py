"""`upstreams[].prompt_cache` — the prompt caching the proxy asks an Anthropic upstream for when the
request asks for none (proxy/protocols/messages/prompt_cache.py): the config key, `auto`'s
top-level field, `breakpoints`' two markers, `off`, a request with markers of its own left exactly
as it is wherever they sit, never more than Anthropic's 4, nothing where `unsupported` lists
`cache_control`, the body never changed in place — through both ways a body is built for a
Messages upstream (passed through and translated)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from proxy.config import ConfigError, Upstream, parse
from proxy.config.model import Account
from proxy.protocols import registry
from proxy.protocols.exchange import Exchange
from proxy.protocols.messages.prompt_cache import MAX_BREAKPOINTS, breakpoints, for_upstream, marked

EPHEMERAL = {"type": "ephemeral"}
UPSTREAM = {"name": "claude", "protocol": "messages", "base_url": "http://127.0.0.1:9000/v1",
            "accounts": [{"id": "a", "api_key": "sk-up-1"}]}


def upstream(mode: str = "auto", unsupported: tuple[str, ...] = ()) -> Upstream:
    return Upstream(name="u", protocol="messages", base_url="https://upstream.invalid/v1",
                    accounts=(Account("a", "sk-test"),), prompt_cache=mode, unsupported=unsupported)


# ------------------------------------------------------------ the config key


def test_the_key_defaults_to_auto_and_takes_the_three_modes() -> None:
    config = parse({"client_keys": ["k"], "upstreams": [
        {**UPSTREAM, "name": n, **({"prompt_cache": n} if n != "default" else {})}
        for n in ("default", "auto", "breakpoints", "off")]})
    assert [u.prompt_cache for u in config.upstreams] == ["auto", "auto", "breakpoints", "off"]


def test_a_bare_off_in_yaml_which_yaml_reads_as_false_is_off() -> None:
    doc = yaml.safe_load("client_keys: [k]\nupstreams:\n- {name: u, protocol: messages, base_url: 'http://x/v1',"
                         " accounts: [{id: a, api_key: k1}], prompt_cache: off}")
    assert doc["upstreams"][0]["prompt_cache"] is False
    assert parse(doc).upstreams[0].prompt_cache == "off"


@pytest.mark.parametrize("value", ["on", True, "automatic", 1])
def test_anything_else_is_a_config_error_naming_the_key(value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        parse({"client_keys": ["k"], "upstreams": [{**UPSTREAM, "prompt_cache": value}]})
    assert caught.value.path == "upstreams[0].prompt_cache" and "auto, breakpoints, off" in caught.value.problem


# ------------------------------------------------------------ the pure function

PLAIN: dict[str, Any] = {
    "model": "m", "max_tokens": 100,
    "system": [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Project notes."}],
    "tools": [{"name": "t", "input_schema": {"type": "object", "properties": {"cache_control": {"type": "string"}}}}],
    "messages": [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                          {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
                                     {"type": "text", "text": "and now?"}]},
    ],
}


def test_auto_sets_the_top_level_field_and_nothing_else() -> None:
    before = copy.deepcopy(PLAIN)
    out = marked(PLAIN, "auto")
    assert out == {**PLAIN, "cache_control": EPHEMERAL}
    assert breakpoints(out) == 1 and before == PLAIN  # the given body is never changed


def test_breakpoints_marks_the_last_system_block_and_the_last_block_of_the_final_message() -> None:
    before = copy.deepcopy(PLAIN)
    out = marked(PLAIN, "breakpoints")
    assert "cache_control" not in out
    assert out["system"] == [PLAIN["system"][0], {**PLAIN["system"][1], "cache_control": EPHEMERAL}]
    assert out["messages"][:2] == PLAIN["messages"][:2]
    assert out["messages"][2]["content"] == [PLAIN["messages"][2]["content"][0],
                                             {"type": "text", "text": "and now?", "cache_control": EPHEMERAL}]
    assert out["tools"] == PLAIN["tools"] and breakpoints(out) == 2 and before == PLAIN


def test_breakpoints_turns_strings_into_one_marked_text_block() -> None:
    out = marked({"model": "m", "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}, "breakpoints")
    assert out["system"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}]


def test_breakpoints_skips_blocks_that_cannot_carry_one() -> None:
    # A final assistant turn (a prefill) ending in thinking and an empty text: the tool_use before them.
    body = {"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "t", "input": {}},
                                          {"type": "redacted_thinking", "data": "d"},
                                          {"type": "text", "text": ""}]}]}
    out = marked(body, "breakpoints")
    assert [b.get("cache_control") for b in out["messages"][1]["content"]] == [EPHEMERAL, None, None]
    assert "system" not in out and breakpoints(out) == 1
    nothing = {"model": "m", "messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}]}]}
    assert marked(nothing, "breakpoints") is nothing


def test_off_adds_nothing() -> None:
    assert marked(PLAIN, "off") is PLAIN


OWN_MARKERS = {
    "top level": lambda b: {**b, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    "system block": lambda b: {**b, "system": [b["system"][0], {**b["system"][1], "cache_control": EPHEMERAL}]},
    "first message block": lambda b: {**b, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "first", "cache_control": EPHEMERAL}]},
        *b["messages"][1:]]},
    "tool result content": lambda b: {**b, "messages": [*b["messages"][:2], {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1",
         "content": [{"type": "text", "text": "ok", "cache_control": EPHEMERAL}]}]}]},
    "tool": lambda b: {**b, "tools": [{**b["tools"][0], "cache_control": EPHEMERAL}]},
}


@pytest.mark.parametrize("where", sorted(OWN_MARKERS))
@pytest.mark.parametrize("mode", ["auto", "breakpoints"])
def test_a_request_with_a_marker_of_its_own_anywhere_is_left_exactly_as_it_is(where: str, mode: str) -> None:
    body = OWN_MARKERS[where](copy.deepcopy(PLAIN))
    sent = json.dumps(body)
    assert marked(body, mode) is body and json.dumps(body) == sent and breakpoints(body) == 1


def test_a_cache_control_inside_a_tool_schema_is_the_clients_data_not_a_marker() -> None:
    assert breakpoints(PLAIN) == 0  # PLAIN's tool schema has a property named cache_control
    assert marked(PLAIN, "auto")["cache_control"] == EPHEMERAL


def test_never_more_than_anthropics_four() -> None:
    four = {"model": "m", "system": [{"type": "text", "text": f"s{i}", "cache_control": EPHEMERAL} for i in range(4)],
            "messages": [{"role": "user", "content": "hi"}]}
    for mode in ("auto", "breakpoints"):
        assert breakpoints(marked(four, mode)) == MAX_BREAKPOINTS
        assert breakpoints(marked(PLAIN, mode)) <= 2


def test_nothing_where_the_upstream_does_not_take_cache_control() -> None:
    for mode in ("auto", "breakpoints"):
        assert for_upstream(PLAIN, upstream(mode, unsupported=("cache_control",))) is PLAIN
        assert for_upstream(PLAIN, upstream(mode, unsupported=("top_k",))) != PLAIN


# ------------------------------------------------------------ both ways a Messages body is built


def sent(client: str, body: dict[str, Any], up: Upstream) -> dict[str, Any]:
    messages = registry.get("messages")
    if client == "messages":
        ex = Exchange(protocol=client, body=body, model="m", stream=False, request_id="r")
        return messages.passthrough.prepare_request(ex, body, "claude-x", up)
    return messages.upstream.encode_request(registry.get(client).client.decode_request(body), "claude-x", up)


CLIENT_BODIES = {
    "messages": {"model": "m", "max_tokens": 10, "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]},
    "chat_completions": {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                                    {"role": "user", "content": "hi"}]},
    "responses": {"model": "m", "instructions": "Be brief.", "input": "hi"},
}


@pytest.mark.parametrize("client", sorted(CLIENT_BODIES))
def test_every_client_protocol_gets_the_upstreams_mode(client: str) -> None:
    auto = sent(client, copy.deepcopy(CLIENT_BODIES[client]), upstream("auto"))
    assert auto["cache_control"] == EPHEMERAL and breakpoints(auto) == 1
    marks = sent(client, copy.deepcopy(CLIENT_BODIES[client]), upstream("breakpoints"))
    assert "cache_control" not in marks and breakpoints(marks) == 2
    assert marks["system"][-1]["cache_control"] == EPHEMERAL
    assert marks["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert breakpoints(sent(client, copy.deepcopy(CLIENT_BODIES[client]), upstream("off"))) == 0


def test_a_messages_clients_own_markers_pass_through_untouched() -> None:
    body = {"model": "m", "max_tokens": 10,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            "messages": [{"role": "user", "content": "hi"}]}
    out = sent("messages", copy.deepcopy(body), upstream("auto"))
    assert out == {**body, "model": "claude-x"}
