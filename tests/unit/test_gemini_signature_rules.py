"""The signature rules a request bound for a Gemini upstream is made to keep (docs/protocols.md §9.6),
the envelope that carries a Gemini signature through the other protocols' clients, and the Chat
client's carriage of it: each test fails if a signature is dropped, moved or sent where it would be
refused."""

from __future__ import annotations

import json
import time

from proxy.ir.events import BlockStart, BlockStop, Finish, Signature, Start
from proxy.ir.reasoning import gemini_envelope, gemini_from_envelope, is_minted, signature_to_encrypted
from proxy.ir.request import ReasoningPart, TextPart, ToolCallPart
from proxy.ir.response import Response
from proxy.pool.classify import Classifier, cooldown_until
from proxy.protocols.chat_completions import request as chat_request
from proxy.protocols.chat_completions import response as chat_response
from proxy.protocols.chat_completions.stream_encode import ChatStreamEncoder
from proxy.protocols.gemini.signatures import current_turn_start, sign_current_turn, without_minted
from proxy.protocols.gemini.vocabulary import SKIP_SIGNATURE
from proxy.protocols.sse import SSEParser

SKIP = SKIP_SIGNATURE


def call(name: str, signature: str | None = None) -> dict:
    part: dict = {"functionCall": {"name": name, "args": {}}}
    if signature is not None:
        part["thoughtSignature"] = signature
    return part


def result(name: str) -> dict:
    return {"functionResponse": {"name": name, "response": {"result": "ok"}}}


def user(text: str) -> dict:
    return {"role": "user", "parts": [{"text": text}]}


def test_envelope_round_trip_and_minted() -> None:
    env = gemini_envelope("c2lnbmF0dXJl", "gem/gemini-3-pro", "next")
    assert gemini_from_envelope(env) == ("c2lnbmF0dXJl", "gem/gemini-3-pro", "next")
    assert is_minted(env)  # so every non-Gemini upstream encoder leaves it out
    assert gemini_from_envelope("c2lnbmF0dXJl") is None and gemini_from_envelope(None) is None
    assert signature_to_encrypted(env, None) == env  # a Responses client keeps it as it is


def test_current_turn_starts_after_the_last_user_content_that_is_not_only_results() -> None:
    contents = [user("a"), {"role": "model", "parts": [call("f")]}, {"role": "user", "parts": [result("f")]},
                user("b"), {"role": "model", "parts": [call("g")]}, {"role": "user", "parts": [result("g")]}]
    assert current_turn_start(contents) == 4


def test_each_step_of_the_current_turn_gets_the_skip_value_on_its_first_call_only() -> None:
    contents = [user("old"), {"role": "model", "parts": [call("old")]}, {"role": "user", "parts": [result("old")]},
                user("now"),
                {"role": "model", "parts": [{"text": "thinking", "thought": True}, call("a"), call("b")]},
                {"role": "user", "parts": [result("a"), result("b")]},
                {"role": "model", "parts": [call("c", "real-signature")]},
                {"role": "user", "parts": [result("c")]}]
    signed = sign_current_turn(contents)
    assert signed[1] == contents[1]  # earlier turns are not validated: left as they are
    step1 = signed[4]["parts"]
    assert step1[1]["thoughtSignature"] == SKIP and "thoughtSignature" not in step1[2]  # parallel: the first only
    assert "thoughtSignature" not in step1[0]
    assert signed[6]["parts"][0]["thoughtSignature"] == "real-signature"  # never replaced
    assert "thoughtSignature" not in contents[4]["parts"][1]  # the input is not changed


def test_the_proxys_own_tokens_come_off_and_googles_stay() -> None:
    env = gemini_envelope("x", "o", "next")
    contents = [user("q"), {"role": "model", "parts": [{"text": "t", "thought": True, "thoughtSignature": env},
                                                       call("f", "google-sig")]}]
    cleaned = without_minted(contents)
    assert "thoughtSignature" not in cleaned[1]["parts"][0]
    assert cleaned[1]["parts"][1]["thoughtSignature"] == "google-sig"


def _response(parts: list) -> Response:
    return Response(id="r", model="m", created=0, output=parts, finish_reason="tool_calls")


def test_chat_client_whole_answer_carries_the_call_signature_on_its_call_and_gets_it_back() -> None:
    on_call = gemini_envelope("sig-call", "gem/gemini-3", "next")
    on_text = gemini_envelope("sig-text", "gem/gemini-3", "prev")
    body = chat_response.encode(_response([ReasoningPart(text="why"), TextPart("see"), ReasoningPart(signature=on_text),
                                           ReasoningPart(signature=on_call),
                                           ToolCallPart(id="call_1", name="f", arguments="{}"),
                                           ToolCallPart(id="call_2", name="g", arguments="{}")]), "m")
    message = body["choices"][0]["message"]
    first, second = message["tool_calls"]
    assert first["extra_content"] == {"google": {"thought_signature": on_call}}
    assert "extra_content" not in second  # parallel calls: one signature, on the first
    assert message["extra_content"] == {"google": {"thought_signature": on_text}}
    back = chat_request.decode({"model": "m", "messages": [{"role": "user", "content": "q"}, message]})
    parts = back.messages[1].parts
    kinds = [(type(p).__name__, getattr(p, "signature", None)) for p in parts]
    assert kinds.index(("ReasoningPart", on_call)) == kinds.index(("ToolCallPart", None)) - 1
    assert ("ReasoningPart", on_text) in kinds


def test_chat_client_ignores_a_value_that_is_not_the_proxys() -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"},
         "extra_content": {"google": {"thought_signature": "Z29vZ2xl"}}}]}
    back = chat_request.decode({"model": "m", "messages": [{"role": "user", "content": "q"}, message]})
    assert not any(isinstance(p, ReasoningPart) for p in back.messages[1].parts)


def test_chat_client_stream_puts_the_signature_on_the_next_calls_first_delta() -> None:
    env = gemini_envelope("sig", "gem/gemini-3", "next")
    encoder = ChatStreamEncoder("m", include_usage=False)
    frames = []
    for ev in [Start("r", "m", int(time.time())), BlockStart(ReasoningPart(), 0), Signature(signature=env, block=0),
               BlockStop(0), BlockStart(ToolCallPart("call_1", "f", ""), 1), BlockStop(1), Finish("tool_calls")]:
        frames += encoder.encode(ev)
    parser = SSEParser()
    events = [json.loads(e.data) for f in frames for e in parser.feed(f) if e.data != b"[DONE]"]
    calls = [c for e in events for ch in e["choices"] for c in ch["delta"].get("tool_calls", [])]
    assert calls[0]["extra_content"] == {"google": {"thought_signature": env}} and calls[0]["id"] == "call_1"


GOOGLE_429 = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota exceeded", "details": [
    {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
     "violations": [{"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},
    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "23s"}]}}


def test_google_quota_errors_are_classified_by_the_quota_they_name() -> None:
    per_day = json.dumps(GOOGLE_429)
    per_minute = per_day.replace("PerDay", "PerMinute")
    classifier = Classifier()
    assert (classifier.classify(429, per_day).klass, classifier.classify(429, per_minute).klass) == \
        ("exhausted", "rate_limited")
    now = 1_800_000_000.0
    assert cooldown_until({}, now, 60, per_minute) == now + 23
    assert 0 < cooldown_until({}, now, 60, per_day) - now <= 25 * 3600  # the next midnight Pacific
    invalid = '{"error": {"code": 400, "status": "INVALID_ARGUMENT", "details": [{"reason": "API_KEY_INVALID"}]}}'
    assert classifier.classify(400, invalid).action == "disable"
    assert classifier.classify(403, '{"error": {"status": "PERMISSION_DENIED"}}').action == "disable"
    assert classifier.classify(400, '{"error": {"status": "INVALID_ARGUMENT"}}').action == "fail"
