"""Responses request decoding details, and the response store's bounds (with a fake clock)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.errors import ProxyError
from proxy.ir.request import ReasoningPart, TextPart, ToolCallPart
from proxy.protocols.responses.conversation import expand
from proxy.protocols.responses.request import decode
from proxy.response_store import ResponseStore


@pytest.mark.parametrize(("body", "message"), [
    ({"input": "x"}, "model: is required"),
    ({"model": "m"}, "input: is required"),
    ({"model": "m", "input": [{"content": "x"}]}, "input[0].type: is required"),
    ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role: must be one of"),
    ({"model": "m", "input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id: is required"),
    ({"model": "m", "input": "x", "tools": [{"name": "f"}]}, "tools[0].type: is required"),
    ({"model": "m", "input": "x", "tool_choice": "sometimes"}, "tool_choice: must be one of"),
    ({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type: must be one of"),
])
def test_errors_name_the_field(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ProxyError) as caught:
        items = body.get("input") if isinstance(body.get("input"), list) else []
        decode(body, items)
    assert caught.value.info.status == 400 and message in caught.value.info.message


def test_assistant_side_items_merge_into_one_turn() -> None:
    req = decode({"model": "m", "input": []}, [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s1"}, {"type": "summary_text", "text": "s2"}]},
        {"role": "assistant", "content": "text"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c", "output": "r"},
    ])
    assistant, tool = req.messages
    assert assistant.parts == [ReasoningPart(text="s1\n\ns2"), TextPart("text"),
                               ToolCallPart("c", "f", "{}", item_id="fc_1")]
    assert tool.role == "tool"


def test_reasoning_null_and_none_effort() -> None:
    assert decode({"model": "m", "input": "x", "reasoning": None}, []).reasoning is None
    none = decode({"model": "m", "input": "x", "reasoning": {"effort": "none"}}, []).reasoning
    assert none is not None and none.enabled is False


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def response(rid: str, *items: str) -> dict[str, Any]:
    return {"id": rid, "output": [{"id": i, "type": "message", "role": "assistant", "content": []} for i in items]}


def test_store_chain_ttl_and_bound() -> None:
    clock = Clock()
    store = ResponseStore(max_entries=2, ttl=10, clock=clock)
    store.put(response("r1", "m1"), [{"id": "u1", "type": "message"}], None)
    store.put(response("r2", "m2"), [{"id": "u2", "type": "message"}], "r1")
    assert [i["id"] for i in store.conversation("r2") or []] == ["u1", "m1", "u2", "m2"]
    assert store.item("m1") is not None
    store.put(response("r3", "m3"), [], "r2")  # bound of 2: r1 and its items go
    assert store.get("r1") is None and store.item("m1") is None and store.conversation("r3") is None
    clock.now = 11
    assert store.get("r3") is None  # expired


def test_expand_resolves_references_and_names_missing_ones() -> None:
    store = ResponseStore()
    store.put(response("r1", "m1"), [], None)
    conversation = expand({"input": [{"type": "item_reference", "id": "m1"}, {"role": "user", "content": "x"}]}, store)
    assert conversation.items[0]["id"] == "m1" and conversation.items[1]["id"].startswith("msg_")
    with pytest.raises(ProxyError) as caught:
        expand({"input": [{"type": "item_reference", "id": "nope"}]}, store)
    assert caught.value.info.status == 400 and caught.value.info.param == "input[0]"
