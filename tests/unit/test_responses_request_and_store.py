"""Responses request decoding details, the response store's bounds (with a fake clock), and which
body each attempt gets from the conversation state."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.config import Account, Upstream
from proxy.conversations.responses import ResponsesConversation
from proxy.conversations.store import Origin, ResponseStore
from proxy.errors import ProxyError
from proxy.ir.request import ReasoningPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo
from proxy.protocols.responses.passthrough import ResponsesPassthroughStream
from proxy.protocols.responses.request import decode
from proxy.protocols.responses.stream_encode import ResponsesStreamEncoder
from proxy.protocols.sse import SSEEvent, event_frame


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


CHAT = Upstream(name="chat", protocol="chat_completions", base_url="http://c/v1", accounts=(Account("c1", "k"),))
RESP = Upstream(name="resp", protocol="responses", base_url="http://r/v1", accounts=(Account("r1", "k"),))


def test_expansion_resolves_references_and_names_missing_ones() -> None:
    store = ResponseStore()
    store.put(response("r1", "m1"), [], None)
    body = {"input": [{"type": "item_reference", "id": "m1"}, {"role": "user", "content": "x"}]}
    items = ResponsesConversation(body, store).body_for(CHAT, "c1")["input"]
    assert items[0]["id"] == "m1" and items[1]["id"].startswith("msg_")
    with pytest.raises(ProxyError) as caught:
        ResponsesConversation({"input": [{"type": "item_reference", "id": "nope"}]}, store).body_for(CHAT, "c1")
    assert caught.value.info.status == 400 and caught.value.info.param == "input[0]"
    with pytest.raises(ProxyError) as missing:  # the real API's answer: 400 previous_response_not_found
        ResponsesConversation({"previous_response_id": "resp_gone", "input": "x"}, store).body_for(CHAT, "c1")
    assert (missing.value.info.status, missing.value.info.code) == (400, "previous_response_not_found")


def test_an_upstream_gets_the_ids_it_holds_and_the_history_otherwise() -> None:
    store = ResponseStore()
    turn1 = {"id": "resp_1", "store": True, "output": [
        {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA-upstream"},
        {"id": "rs_2", "type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
        {"id": "rs_3", "type": "reasoning", "summary": [], "encrypted_content": "llmproxy1.an.e30="},
        {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}]}
    store.put(turn1, [{"id": "msg_u", "type": "message", "role": "user", "content": "hi"}], None,
              Origin("resp", "r1", kept=True))
    body = {"model": "m", "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "call_1", "output": "ok"}]}
    conversation = ResponsesConversation(body, store)
    assert conversation.body_for(RESP, "r1") is body  # it served and kept resp_1: the id goes as it is
    for upstream, account in ((RESP, "r2"), (CHAT, "c1")):  # another account, another upstream
        sent = conversation.body_for(upstream, account)
        assert "previous_response_id" not in sent and sent["model"] == "m"
    replayed = conversation.body_for(RESP, "r2")["input"]
    assert replayed == [  # by value: no ids it never held; reasoning only with its own encrypted_content
        {"type": "message", "role": "user", "content": "hi"},
        {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA-upstream"},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"}]
    assert [i["type"] for i in conversation.body_for(CHAT, "c1")["input"]] == [
        "message", "reasoning", "reasoning", "reasoning", "function_call", "function_call_output"]
    # An id the proxy never issued goes up as it is to a Responses upstream, which may know it.
    unknown = {"model": "m", "previous_response_id": "resp_elsewhere", "input": "x"}
    assert ResponsesConversation(unknown, store).body_for(RESP, "r2") is unknown
    # An item_reference to the upstream's own output goes as it is; to another's, by value.
    store.put({"id": "resp_2", "output": [{"id": "msg_2", "type": "message", "role": "assistant", "content": []}]},
              [], None, Origin("chat", "c1", kept=False))
    for ref, as_is in (("fc_1", True), ("msg_2", False), ("msg_u", False)):
        referring = {"model": "m", "input": [{"type": "item_reference", "id": ref}]}
        assert (ResponsesConversation(referring, store).body_for(RESP, "r1") is referring) is as_is, ref


def test_every_answer_is_kept_with_its_origin_unless_store_is_false() -> None:
    store = ResponseStore()
    body = {"model": "m", "input": "hi"}
    conversation = ResponsesConversation(body, store)
    conversation.keep({"id": "resp_up", "store": True, "output": []}, RESP, "r1", passthrough=True)
    entry = store.get("resp_up")
    assert entry is not None and entry.origin == Origin("resp", "r1", kept=True)
    assert entry.input_items[0]["content"][0]["text"] == "hi" and entry.input_items[0]["id"].startswith("msg_")
    # The proxy's own id: the upstream has none.
    conversation.keep({"id": "resp_proxy", "store": True, "output": []}, RESP, "r1", passthrough=False)
    entry = store.get("resp_proxy")
    assert entry is not None and entry.origin is not None and not entry.origin.kept
    ResponsesConversation({**body, "store": False}, store).keep({"id": "resp_unstored", "output": []}, RESP, "r1",
                                                               passthrough=True)
    assert store.get("resp_unstored") is None


def passthrough_events(previous: str | None) -> list[SSEEvent]:
    response = {"id": "resp_up", "object": "response", "status": "in_progress", "output": [],
                "previous_response_id": previous}
    done = {**response, "status": "completed", "output": [{"id": "msg_1", "type": "message", "role": "assistant",
                                                           "content": [{"type": "output_text", "text": "hi"}]}]}
    return [SSEEvent(kind, json.dumps({"type": kind, "sequence_number": n, **fields}).encode()) for n, (kind, fields) in
            enumerate([("response.created", {"response": response}),
                       ("response.output_item.added", {"output_index": 0, "item": {
                           "id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
                       ("response.output_text.delta", {"item_id": "msg_1", "output_index": 0, "delta": "hi"}),
                       ("response.completed", {"response": done})])]


def test_a_passthrough_stream_finishes_with_its_final_response_and_echoes_the_clients_previous_id() -> None:
    relay = ResponsesPassthroughStream()
    frames = []
    for sse in passthrough_events(None):
        assert relay.final is None  # only once it finished
        frames += relay.feed(sse)
    assert frames == [event_frame(sse) for sse in passthrough_events(None)]  # byte for byte
    assert relay.final is not None and relay.final["id"] == "resp_up" and relay.final["status"] == "completed"
    # The conversation went up by value: the lifecycle events say what the client chained from.
    relay = ResponsesPassthroughStream("resp_prev")
    frames = [frame for sse in passthrough_events(None) for frame in relay.feed(sse)]
    created, _, _, completed = (json.loads(frame.split(b"data: ", 1)[1]) for frame in frames)
    assert created["response"]["previous_response_id"] == completed["response"]["previous_response_id"] == "resp_prev"
    assert frames[1] == event_frame(passthrough_events(None)[1])
    assert relay.final is not None and relay.final["previous_response_id"] == "resp_prev"
    # Sent as is, the upstream echoes it itself: nothing is rewritten.
    relay = ResponsesPassthroughStream("resp_prev")
    assert [f for sse in passthrough_events("resp_prev") for f in relay.feed(sse)] == [
        event_frame(sse) for sse in passthrough_events("resp_prev")]


def test_a_failed_stream_finishes_with_no_final_response() -> None:
    relay = ResponsesPassthroughStream()
    relay.feed(passthrough_events(None)[0])
    relay.fail(ErrorInfo("upstream_error", "broke off", 502))
    assert relay.done and relay.final is None
    encoder = ResponsesStreamEncoder({"model": "m", "input": "hi"}, "m", set(), False)
    encoder.fail(ErrorInfo("upstream_error", "broke off", 502))
    assert encoder.done and encoder.final is None
