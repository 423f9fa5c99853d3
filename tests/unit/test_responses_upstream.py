"""The upstream half of the Responses codec: IR → request body, recorded-style Responses streams →
IR events (whole and split at every byte offset), whole response objects → IR, and the rule that
folding a stream gives the same answer as decoding its final response object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.config import Account, Upstream
from proxy.ir.events import BlockStart, BlockStop, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.fold import check_well_formed, fold
from proxy.ir.reasoning import anthropic_to_encrypted
from proxy.ir.request import (
    FilePart,
    ImagePart,
    Message,
    Reasoning,
    ReasoningPart,
    RefusalPart,
    Request,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.responses.stream_decode import ResponsesStreamDecoder
from proxy.protocols.responses.upstream_request import encode
from proxy.protocols.responses.upstream_response import decode
from proxy.protocols.sse import SSEParser

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sse" / "responses"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.sse"))
UPSTREAM = Upstream(name="oai", protocol="responses", base_url="https://api.openai.com/v1",
                    accounts=(Account("a", "sk-test"),))


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.sse").read_bytes()


def run(pieces: list[bytes]) -> list[Event]:
    """Feed the pieces through the SSE parser and a fresh decoder, then end the stream."""
    parser, decoder = SSEParser(), ResponsesStreamDecoder()
    out: list[Event] = []
    for piece in pieces:
        for sse in parser.feed(piece):
            out += decoder.feed(sse)
    for sse in parser.flush():
        out += decoder.feed(sse)
    return out + decoder.close()


def final_response(name: str) -> dict[str, Any]:
    """The response object of the fixture's last lifecycle event (completed / incomplete / failed)."""
    docs = [json.loads(line[len(b"data: "):]) for line in fixture(name).splitlines() if line.startswith(b"data: ")]
    return docs[-1]["response"]


# ---------------------------------------------------------------- encode


def test_encode_representative_request() -> None:
    req = Request(
        model="client-model",
        stream=True,
        messages=[
            Message("system", [TextPart("You are terse."), TextPart("Answer in English.")]),
            Message("developer", [TextPart("Prefer metric units.")]),
            Message("user", [TextPart("Weather in Paris and Tokyo?"),
                             ImagePart(data="iVBORw0KGgo=", media_type="image/png"),
                             FilePart(data="JVBERi0=", media_type="application/pdf")]),
            Message("assistant", [
                ReasoningPart(text="Two cities.", encrypted="gAAAAABenc", id="rs_1"),
                ReasoningPart(text="Anthropic thinking", signature="EqQBCkYIBxgCKkA"),  # not this upstream's
                TextPart("Checking."),
                ToolCallPart("call_1", "get_weather", '{"city":"Paris"}', item_id="fc_1"),
                ToolCallPart("call_2", "apply_patch", "*** Begin Patch\n*** End Patch", kind="custom"),
            ]),
            Message("tool", [ToolResultPart("call_1", [TextPart("18C, sunny")]),
                             ToolResultPart("call_2", [TextPart("Done.")], kind="custom")]),
            Message("system", [TextPart("Be brief.")]),
            Message("user", [TextPart("Thanks")]),
        ],
        tools=[Tool("get_weather", "Get the weather.", {"type": "object", "properties": {"city": {"type": "string"}}}),
               Tool("apply_patch", "Edit files.", kind="custom",
                    format={"type": "grammar", "syntax": "lark", "definition": "start: x"})],
        tool_choice=ToolChoice("tool", name="get_weather"),
        parallel_tool_calls=False,
        max_tokens=100_000,
        temperature=0.5,
        stop=["END"],
        user="u-1",
        reasoning=Reasoning(budget_tokens=16000),
        response_format=ResponseFormat("json_schema", name="weather", schema={"type": "object"}, strict=True),
    )
    upstream = Upstream(name="oai", protocol="responses", base_url="https://x/v1", accounts=(Account("a", "k"),),
                        max_output_tokens=32000)
    assert encode(req, "gpt-5", upstream) == {
        "model": "gpt-5",
        "instructions": "You are terse.\nAnswer in English.\n\nPrefer metric units.",
        "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Weather in Paris and Tokyo?"},
                {"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,iVBORw0KGgo="},
                {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "file.pdf"},
            ]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Two cities."}],
             "encrypted_content": "gAAAAABenc"},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch",
             "input": "*** Begin Patch\n*** End Patch"},
            {"type": "function_call_output", "call_id": "call_1", "output": "18C, sunny"},
            {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done."},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
        ],
        "tools": [
            {"type": "function", "name": "get_weather", "description": "Get the weather.",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": False},
            {"type": "custom", "name": "apply_patch", "description": "Edit files.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
        ],
        "parallel_tool_calls": False,
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 32000,
        "temperature": 0.5,
        "user": "u-1",
        "reasoning": {"effort": "high"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "text": {"format": {"type": "json_schema", "name": "weather", "schema": {"type": "object"}, "strict": True}},
        "stream": True,
    }


def minimal(**fields: Any) -> Request:
    return Request(model="m", messages=[Message("user", [TextPart("hi")])], **fields)


@pytest.mark.parametrize(("reasoning", "expected"), [
    (Reasoning(budget_tokens=2048), {"effort": "low"}),
    (Reasoning(budget_tokens=8192), {"effort": "medium"}),
    (Reasoning(budget_tokens=8193), {"effort": "high"}),
    (Reasoning(enabled=True), {"effort": "medium"}),
    (Reasoning(effort="minimal", summary="auto"), {"effort": "minimal", "summary": "auto"}),
    (Reasoning(enabled=False, budget_tokens=4000), None),
    (None, None),
])
def test_encode_reasoning(reasoning: Reasoning | None, expected: dict[str, Any] | None) -> None:
    body = encode(minimal(reasoning=reasoning), "m", UPSTREAM)
    assert body.get("reasoning") == expected
    assert body.get("include") == (["reasoning.encrypted_content"] if expected else None)


def test_encode_options() -> None:
    body = encode(minimal(max_tokens=1, extras={"store": True}), "m", UPSTREAM)
    assert body["max_output_tokens"] == 16  # the API's floor: Claude clients probe with max_tokens 1
    assert body["store"] is True
    assert body["stream"] is False
    assert "instructions" not in body and "tools" not in body and "text" not in body
    choices = {
        "auto": ToolChoice("auto"), "none": ToolChoice("none"), "required": ToolChoice("required"),
    }
    for wire, choice in choices.items():
        assert encode(minimal(tool_choice=choice), "m", UPSTREAM)["tool_choice"] == wire
    allowed = encode(minimal(tools=[Tool("a"), Tool("b", kind="custom")],
                             tool_choice=ToolChoice("required", allowed=["a", "b"])), "m", UPSTREAM)
    assert allowed["tool_choice"] == {"type": "allowed_tools", "mode": "required",
                                      "tools": [{"type": "function", "name": "a"}, {"type": "custom", "name": "b"}]}
    assert allowed["tools"][0] == {"type": "function", "name": "a", "parameters": {"type": "object", "properties": {}},
                                   "strict": False}
    json_object = encode(minimal(response_format=ResponseFormat("json_object")), "m", UPSTREAM)
    assert json_object["text"] == {"format": {"type": "json_object"}}


def test_encode_drops_reasoning_this_upstream_did_not_make() -> None:
    minted = anthropic_to_encrypted("EqQBCkYIBxgCKkA", None)  # a proxy envelope, not OpenAI's blob
    req = Request(model="m", messages=[
        Message("user", [TextPart("q")]),
        Message("assistant", [ReasoningPart(text="deepseek thoughts"), ReasoningPart(redacted="xyz"),
                              ReasoningPart(text="wrapped", encrypted=minted), TextPart("a")]),
    ])
    body = encode(req, "m", UPSTREAM)
    assert [item["type"] for item in body["input"]] == ["message", "message"]
    assert "include" not in body


def test_encode_tool_result_with_image() -> None:
    req = Request(model="m", messages=[
        Message("assistant", [ToolCallPart("call_1", "shot", "")]),
        Message("tool", [ToolResultPart("call_1", [TextPart("here"), ImagePart(url="https://x/i.png", detail="low")])]),
    ])
    items = encode(req, "m", UPSTREAM)["input"]
    assert items == [
        {"type": "function_call", "call_id": "call_1", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_text", "text": "here"},
            {"type": "input_image", "detail": "low", "image_url": "https://x/i.png"}]},
    ]


def test_encrypted_reasoning_round_trips() -> None:
    """Reasoning an upstream answered with goes back to it, in place, with its blob untouched."""
    answer = decode(final_response("reasoning_then_two_tools"))
    reasoning = answer.output[0]
    assert isinstance(reasoning, ReasoningPart) and reasoning.encrypted and reasoning.id
    req = Request(model="m", messages=[
        Message("user", [TextPart("Weather?")]),
        Message("assistant", list(answer.output)),
        Message("tool", [ToolResultPart(p.id, [TextPart("ok")]) for p in answer.output if isinstance(p, ToolCallPart)]),
    ])
    items = encode(req, "m", UPSTREAM)["input"]
    assert items[1] == {"type": "reasoning", "id": reasoning.id,
                        "summary": [{"type": "summary_text", "text": reasoning.text}],
                        "encrypted_content": reasoning.encrypted}
    assert [(i["type"], i["call_id"]) for i in items[2:]] == [
        ("function_call", "call_Wq8bX2nT5kLm9pRs4vYz1aCd"), ("function_call", "call_Hj3kL6mN9pQ2rS5tU8vW1xYz"),
        ("function_call_output", "call_Wq8bX2nT5kLm9pRs4vYz1aCd"),
        ("function_call_output", "call_Hj3kL6mN9pQ2rS5tU8vW1xYz")]


# ---------------------------------------------------------------- stream decode


def test_text_stream() -> None:
    events = run([fixture("text")])
    assert events == [
        Start("resp_0d3c1b6a9e2f4a7c0068f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5", "gpt-4.1-mini-2025-04-14", 1760600000),
        BlockStart(TextPart("")),
        *[Delta(t) for t in ["Hello", "!", " How", " can", " I", " help", " you", " today", "?", " 👋"]],
        BlockStop(),
        UsageUpdate(Usage(input_tokens=19, output_tokens=11)),
        Finish("stop"),
    ]


def test_reasoning_then_two_tools_stream() -> None:
    events = run([fixture("reasoning_then_two_tools")])
    final = final_response("reasoning_then_two_tools")
    encrypted = final["output"][0]["encrypted_content"]
    assert events == [
        Start("resp_0b2d4f6a8c0e1f3a5b0068f1c0a1b2c3d4e5f6a7b8c9d0e1f2", "gpt-5-2025-08-07", 1760600200),
        BlockStart(ReasoningPart(id="rs_0b2d4f6a8c0e1f3a5b0068f1c0b2c3d4e5f6a7b8c9d0e1f2a3"), 0),
        *[Delta(t, 0) for t in ["**Check", "ing weather", " for two cities**\n\n", "I'll call get_weather",
                                " for Paris and", " Tokyo in parallel."]],
        Signature(encrypted=encrypted, block=0),  # from output_item.done: the one in output_item.added is partial
        BlockStop(0),
        BlockStart(ToolCallPart("call_Wq8bX2nT5kLm9pRs4vYz1aCd", "get_weather",
                                item_id="fc_0b2d4f6a8c0e1f3a5b0068f1c0c3d4e5f6a7b8c9d0e1f2a3b4"), 1),
        *[Delta(t, 1) for t in ['{"', "city", '":"', "Paris", '"}']],
        BlockStop(1),
        BlockStart(ToolCallPart("call_Hj3kL6mN9pQ2rS5tU8vW1xYz", "get_weather",
                                item_id="fc_0b2d4f6a8c0e1f3a5b0068f1c0d4e5f6a7b8c9d0e1f2a3b4c5"), 2),
        *[Delta(t, 2) for t in ['{"', "city", '":"', "Tok", "yo", '"}']],
        BlockStop(2),
        UsageUpdate(Usage(input_tokens=96, output_tokens=123, reasoning_tokens=64)),
        Finish("tool_calls"),
    ]


def test_reasoning_summary_parts_join_with_a_blank_line() -> None:
    answer = fold(run([fixture("reasoning_then_text")]))
    reasoning, text = answer.output
    assert isinstance(reasoning, ReasoningPart)
    assert reasoning.text == ("**Recalling the capital**\n\nThe user asks for the capital of Australia."
                              "\n\n**Answering**\n\nIt is Canberra, not Sydney.")
    assert reasoning.encrypted == final_response("reasoning_then_text")["output"][0]["encrypted_content"]
    assert text == TextPart("The capital of Australia is **Canberra**.")
    assert answer.usage == Usage(input_tokens=2087, output_tokens=219, cache_read_tokens=1920, reasoning_tokens=192)


def test_custom_tool_stream() -> None:
    answer = fold(run([fixture("custom_tool")]))
    reasoning, call = answer.output
    assert isinstance(reasoning, ReasoningPart) and reasoning.text == "" and reasoning.encrypted
    assert call == ToolCallPart("call_Pq7rS9tU1vW3xY5zA7bC9dEf", "apply_patch",
                                '*** Begin Patch\n*** Update File: src/app.py\n@@\n-print("hi")\n'
                                '+print("hello")\n*** End Patch', "custom",
                                "ctc_0e5f6a7b8c9d0e1f2a0068f1d0c3d4e5f6a7b8c9d0e1f2a3b4")
    assert answer.finish_reason == "tool_calls"


def test_incomplete_stream_finishes_with_length() -> None:
    events = run([fixture("incomplete_max_tokens")])
    assert events[-2:] == [UsageUpdate(Usage(input_tokens=14, output_tokens=16)), Finish("length")]


def test_error_then_failed_stream() -> None:
    events = run([fixture("error_then_failed")])
    message = "The server had an error while processing your request. Sorry about that!"
    assert events[1:] == [
        BlockStart(TextPart("")), Delta("Let"), Delta(" me"), Delta(" think"),
        Failure(ErrorInfo("api_error", message, 500, code="server_error")),
    ]
    failed = decode(final_response("error_then_failed"))
    assert failed.error == ErrorInfo("api_error", message, 500, code="server_error")


@pytest.mark.parametrize("name", NAMES)
def test_fixture_is_well_formed_and_split_proof(name: str) -> None:
    """Any split of the bytes gives the same events as the whole stream."""
    data = fixture(name)
    whole = run([data])
    check_well_formed(whole)
    assert isinstance(whole[-1], Finish | Failure)
    assert run([data[i:i + 1] for i in range(len(data))]) == whole
    for cut in range(1, len(data)):
        assert run([data[:cut], data[cut:]]) == whole, cut


# Not for streams that fail: their final response object says what the upstream meant to send.
@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("error_then_failed", "delta_for_unknown_item")])
def test_fold_equals_decode_of_the_final_response(name: str) -> None:
    assert fold(run([fixture(name)])) == decode(final_response(name))


# ---------------------------------------------------------------- broken streams


def failures(events: list[Event]) -> list[Failure]:
    return [e for e in events if isinstance(e, Failure)]


def test_malformed_json_fails_once_at_the_end() -> None:
    frames = fixture("text").split(b"\n\n")
    frames[5] = frames[5][:-10]  # a data line cut short
    events = run([b"\n\n".join(frames)])
    check_well_formed(events)
    assert failures(events) == [events[-1]]
    assert events[-1] == Failure(ErrorInfo("upstream_error", "upstream sent a malformed JSON event in its stream", 502))


@pytest.mark.parametrize("name", ["text", "reasoning_then_two_tools"])
def test_truncated_stream_fails_once_at_the_end(name: str) -> None:
    data = fixture(name)
    end = data.rindex(b"event: response.completed")
    events = run([data[:end]])
    check_well_formed(events)
    assert failures(events) == [events[-1]]
    assert events[-1] == Failure(ErrorInfo("upstream_error", "upstream closed the stream before it finished", 502))
    for cut in range(0, len(data), 13):  # a stream cut anywhere ends in exactly one Finish or Failure
        cut_events = run([data[:cut]])
        check_well_formed(cut_events)
        assert sum(isinstance(e, Finish | Failure) for e in cut_events) == 1


def test_empty_stream_fails() -> None:
    assert run([b""]) == [Failure(ErrorInfo("upstream_error", "upstream closed the stream without sending any event",
                                            502))]


def lines(*payloads: dict[str, Any]) -> bytes:
    return b"".join(b"event: %s\ndata: %s\n\n" % (p["type"].encode(), json.dumps(p).encode()) for p in payloads)


CREATED = {"type": "response.created", "response": {"id": "resp_1", "model": "m", "created_at": 1700000000}}


@pytest.mark.parametrize(("error", "kind", "status"), [
    ({"type": "error", "error": {"type": "tokens", "code": "rate_limit_exceeded", "message": "slow down"}},
     "rate_limit", 429),
    ({"type": "error", "code": "server_is_overloaded", "message": "busy", "param": None}, "overloaded", 529),
    ({"type": "error", "error": {"type": "invalid_request_error", "code": None, "message": "bad"}},
     "invalid_request", 400),
    ({"type": "response.failed", "response": {"status": "failed", "error": {"code": "insufficient_quota",
                                                                             "message": "quota"}}}, "billing", 402),
    ({"type": "response.failed", "response": {"status": "failed", "error": None}}, "api_error", 500),
])
def test_errors_map_to_kinds(error: dict[str, Any], kind: str, status: int) -> None:
    events = run([lines(CREATED, error)])
    check_well_formed(events)
    failure = events[-1]
    assert isinstance(failure, Failure) and (failure.error.kind, failure.error.status) == (kind, status)
    assert failure.error.message


def test_items_sent_whole_and_unknown_items() -> None:
    """No deltas (arguments only in output_item.done), a hosted-tool item, and unknown events."""
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": ""}
    search = {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}
    events = run([lines(
        CREATED,
        {"type": "response.output_item.added", "output_index": 0, "item": search},
        {"type": "response.web_search_call.searching", "output_index": 0, "item_id": "ws_1"},
        {"type": "response.output_item.done", "output_index": 0, "item": {**search, "status": "completed"}},
        {"type": "response.output_item.added", "output_index": 1, "item": call},
        {"type": "response.function_call_arguments.done", "output_index": 1, "item_id": "fc_1", "arguments": '{"a":1}'},
        {"type": "response.output_item.done", "output_index": 1, "item": {**call, "arguments": '{"a":1}'}},
        {"type": "response.output_item.done", "output_index": 2,
         "item": {"id": "msg_1", "type": "message", "content": [{"type": "output_text", "text": "whole"},
                                                                 {"type": "refusal", "refusal": "no"}]}},
        {"type": "response.something_new", "x": 1},
        {"type": "response.completed", "response": {"status": "completed", "usage": None}},
    )])
    check_well_formed(events)
    assert events[1:] == [
        BlockStart(ToolCallPart("call_1", "f", item_id="fc_1"), 0), Delta('{"a":1}', 0), BlockStop(0),
        BlockStart(TextPart(""), 1), Delta("whole", 1), BlockStop(1),
        BlockStart(RefusalPart(""), 2), Delta("no", 2), BlockStop(2),
        Finish("tool_calls"),
    ]


def test_decode_response_object() -> None:
    doc = {
        "id": "resp_9", "object": "response", "created_at": 1700000001, "status": "incomplete", "model": "gpt-5",
        "incomplete_details": {"reason": "content_filter"},
        "output": [
            {"id": "rs_9", "type": "reasoning", "summary": [{"type": "summary_text", "text": "a"}],
             "content": [{"type": "reasoning_text", "text": "b"}], "encrypted_content": None},
            {"id": "msg_9", "type": "message", "role": "assistant", "status": "incomplete",
             "content": [{"type": "output_text", "text": "Hi", "annotations": []}, {"type": "refusal", "refusal": "No"}]},
            {"id": "fc_9", "type": "function_call", "call_id": "call_9", "name": "f", "arguments": {"x": 1}},
            {"id": "ws_9", "type": "web_search_call"},
        ],
        "usage": {"input_tokens": 5, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 2},
                  "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 12},
    }
    resp = decode(doc)
    assert (resp.id, resp.model, resp.created, resp.finish_reason) == ("resp_9", "gpt-5", 1700000001, "content_filter")
    assert resp.output == [ReasoningPart(text="a\n\nb", id="rs_9"), TextPart("Hi"), RefusalPart("No"),
                           ToolCallPart("call_9", "f", '{"x": 1}', item_id="fc_9")]
    assert resp.usage == Usage(input_tokens=5, output_tokens=7, cache_read_tokens=2, reasoning_tokens=3)
    assert resp.error is None


def test_passthrough_after_an_upstream_error_without_response_failed_adds_only_that() -> None:
    from proxy.protocols.responses.passthrough import ResponsesPassthroughStream

    created = {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_x", "status": "in_progress"}}
    error = {"type": "error", "sequence_number": 1, "code": "server_error", "message": "boom"}
    raw = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in (created, error)).encode()
    relay = ResponsesPassthroughStream()
    frames = [f for sse in SSEParser().feed(raw) for f in relay.feed(sse)] + relay.close()
    assert b"".join(frames[:2]) == raw  # the upstream's own events, as they came
    (added,) = frames[2:]
    assert added.startswith(b"event: response.failed\n")
    failed = json.loads(added.split(b"data: ", 1)[1])
    assert failed["sequence_number"] == 2 and failed["response"]["id"] == "resp_x"
    assert failed["response"]["status"] == "failed" and relay.failed is not None and relay.failed.message == "boom"


def test_passthrough_idle_timeout_fails_with_the_timeout_code() -> None:
    """The relay's idle deadline ends a passthrough stream the way the translated one ends."""
    from proxy.protocols.responses.passthrough import ResponsesPassthroughStream

    created = {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_y", "status": "in_progress"}}
    relay = ResponsesPassthroughStream()
    relay.feed(next(iter(SSEParser().feed(f"event: response.created\ndata: {json.dumps(created)}\n\n".encode()))))
    error, failed = (json.loads(f.split(b"data: ", 1)[1])
                     for f in relay.fail(ErrorInfo("timeout", "upstream sent nothing for 2s", 504)))
    assert error["type"] == "error" and error["error"]["code"] == "request_timeout"
    assert failed["type"] == "response.failed" and failed["response"]["id"] == "resp_y"
    assert failed["response"]["error"] == {"code": "request_timeout", "message": "upstream sent nothing for 2s"}
