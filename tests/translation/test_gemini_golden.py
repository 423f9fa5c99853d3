"""Golden transcripts for the Gemini protocol, both ways.

Gemini upstream streams (`tests/fixtures/sse/gemini/*.sse`) are replayed:
- into internal events (golden `gemini__to__ir`), which must be well-formed;
- into every client protocol's stream encoder (golden `gemini__to__<client>/<name>.sse`: Chat,
  Messages, Responses with and without `reasoning.encrypted_content`, Gemini SSE and the Gemini JSON
  array), whole, byte by byte and cut at every offset;
- folded and encoded as each client's whole answer (golden `gemini__to__<client>/<name>.json`; a
  failure as the client protocol's error body and status);
- and read back by each client's SDK (openai-python, anthropic-python, google-genai's own types),
  which must see what the upstream said — text, calls, finish, usage — and every `thoughtSignature`
  the upstream sent, exactly once, in the place docs/protocols.md §9.6 gives it.
The other direction: every recorded Chat, Messages and Responses upstream stream → a Gemini client
(golden `<upstream>__to__gemini/<name>.sse`), every chunk parsed by google-genai's
`GenerateContentResponse`, replayed whole and byte by byte (every cut in two is left to the Gemini
fixtures, whose decoder is the one under test here: the other decoders' splits are covered by their
own goldens, and the events they give do not depend on where the bytes were cut).

Provenance of the Gemini fixtures: the real API cannot be reached from here, so they are written
from Google's documentation as it stood in November 2026 — ai.google.dev/api/generate-content
(GenerateContentResponse, Candidate, FinishReason, PromptFeedback.BlockReason, UsageMetadata,
CitationMetadata), ai.google.dev/gemini-api/docs/thought-signatures (signatures on the first
functionCall of a step and on the first of parallel calls only, on the last part of a text answer,
and, when streaming, on a final part with empty text), ai.google.dev/gemini-api/docs/thinking
(thought parts, `thoughtsTokenCount`), ai.google.dev/gemini-api/docs/image-generation (an
`inlineData` answer, signed on gemini-3-pro-image-preview) and the error table of
ai.google.dev/gemini-api/docs/troubleshooting (503 UNAVAILABLE) — framed as Google's servers frame
`streamGenerateContent?alt=sse`: `data: {…}` + CRLF CRLF, no `[DONE]`, `modelVersion` and
`responseId` on every chunk, partial usage on each and the whole `usageMetadata` with
`finishReason` on the last. The signatures are short base64 blobs standing in for Google's (which
are opaque and much longer); a dropped stream simply ends without a `finishReason`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from google.genai import types

from proxy.config import Upstream
from proxy.config.model import Account
from proxy.ir import response as ir
from proxy.ir.custom_calls import function_arguments
from proxy.ir.events import Event
from proxy.ir.fold import fold
from proxy.ir.reasoning import gemini_from_envelope, is_minted
from proxy.ir.request import ReasoningPart, TextPart, ToolCallPart
from proxy.protocols import registry
from proxy.protocols.chat_completions import response as chat_response
from proxy.protocols.chat_completions.stream_decode import ChatStreamDecoder
from proxy.protocols.chat_completions.stream_encode import ChatStreamEncoder
from proxy.protocols.gemini import carrier
from proxy.protocols.gemini import response as gemini_response
from proxy.protocols.gemini.stream_decode import GeminiStreamDecoder
from proxy.protocols.gemini.stream_encode import GeminiStreamEncoder
from proxy.protocols.messages import response as messages_response
from proxy.protocols.messages.stream_decode import MessagesStreamDecoder
from proxy.protocols.messages.stream_encode import MessagesStreamEncoder
from proxy.protocols.messages.vocabulary import STOP_REASON_FROM_FINISH
from proxy.protocols.responses import response as responses_response
from proxy.protocols.responses.stream_decode import ResponsesStreamDecoder
from proxy.protocols.responses.stream_encode import ResponsesStreamEncoder
from proxy.protocols.transcode import Translation
from tests.clients import read_anthropic_stream, read_chat_stream, read_responses_stream
from tests.translation.golden import (
    check_decoder_golden,
    check_golden,
    fixture,
    fixture_names,
    normalise,
    run_events,
    run_frames,
    splits,
)

MODEL = "client-model"
UPSTREAM = Upstream(name="gemini-up", protocol="gemini", base_url="https://generativelanguage.googleapis.com",
                    accounts=(Account("a", "k"),))
RESPONSES_BODY = {"model": MODEL, "input": "hi", "stream": True, "store": False,
                  "include": ["reasoning.encrypted_content"]}
NAMES = fixture_names("gemini")

# client → (golden folder, golden suffix of the stream, encoder factory)
ENCODERS: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "chat_completions": ("chat_completions", "sse", lambda: ChatStreamEncoder(MODEL, True)),
    "messages": ("messages", "sse", lambda: MessagesStreamEncoder(MODEL, 0)),
    "responses": ("responses", "sse", lambda: ResponsesStreamEncoder(RESPONSES_BODY, MODEL, custom_tools=set(),
                                                                     include_encrypted=True)),
    "responses_plain": ("responses", "plain.sse", lambda: ResponsesStreamEncoder(
        {**RESPONSES_BODY, "include": []}, MODEL, custom_tools=set(), include_encrypted=False)),
    "gemini": ("gemini", "sse", lambda: GeminiStreamEncoder(MODEL, sse=True)),
    "gemini_array": ("gemini", "array.json", lambda: GeminiStreamEncoder(MODEL, sse=False)),
}
_MINTED_GEMINI_ID = re.compile(r'"responseId":"[0-9a-f]{24}"')


def norm(text: str) -> str:
    return _MINTED_GEMINI_ID.sub('"responseId":"<minted>"', normalise(text))


def decode(pieces: list[bytes]) -> list[Event]:
    decoder = GeminiStreamDecoder(UPSTREAM)
    return run_events(pieces, decoder.feed, decoder.close)


def translate(client: str, pieces: list[bytes]) -> bytes:
    relay = Translation(GeminiStreamDecoder(UPSTREAM), ENCODERS[client][2]())
    return run_frames(pieces, relay.feed, relay.close)


def said(name: str) -> ir.Response:
    return fold(decode([fixture("gemini", name)]))


def upstream_chunks(name: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in fixture("gemini", name).decode().split("\r\n") if line.startswith("data: ")]


def upstream_signatures(name: str) -> list[tuple[str, str]]:
    """(kind of part, signature) for every signed part the upstream sent, in order."""
    out = []
    for chunk in upstream_chunks(name):
        for cand in chunk.get("candidates", []):
            for part in cand.get("content", {}).get("parts", []):
                if "thoughtSignature" in part:
                    kind = ("call" if "functionCall" in part else "thought" if part.get("thought")
                            else "text" if part.get("text") or "inlineData" in part else "empty")
                    out.append((kind, part["thoughtSignature"]))
    return out


def signed_before_text(name: str) -> list[str]:
    """The signatures the upstream sent before any answer text (thought, or an empty part after it)."""
    out = []
    for chunk in upstream_chunks(name):
        for cand in chunk.get("candidates", []):
            for part in cand.get("content", {}).get("parts", []):
                if (part.get("text") and not part.get("thought")) or "inlineData" in part:
                    return out
                if "thoughtSignature" in part:
                    out.append(part["thoughtSignature"])
    return out


def opened(envelope: str | None) -> str:
    """Google's signature inside one of the proxy's envelopes, from this upstream."""
    found = gemini_from_envelope(envelope)
    assert found is not None, f"not a Gemini envelope: {envelope!r}"
    signature, origin, _ = found
    assert origin.startswith(f"{UPSTREAM.name}/gemini-")
    return signature


def texts(resp: ir.Response) -> str:
    return "".join(p.text for p in resp.output if isinstance(p, TextPart))


def calls(resp: ir.Response) -> list[tuple[str, Any]]:
    return [(p.name, json.loads(function_arguments(p) or "{}")) for p in resp.output if isinstance(p, ToolCallPart)]


def thinking(resp: ir.Response) -> list[str]:
    return [p.text for p in resp.output if isinstance(p, ReasoningPart) and p.text]


def last_usage(name: str) -> dict[str, int]:
    return [c["usageMetadata"] for c in upstream_chunks(name) if "usageMetadata" in c][-1]


# ------------------------------------------------------------ goldens, at every split


@pytest.mark.parametrize("name", NAMES)
def test_decoder_golden_at_every_split(name: str) -> None:
    check_decoder_golden("gemini", name, decode)


@pytest.mark.parametrize("client", list(ENCODERS))
@pytest.mark.parametrize("name", NAMES)
def test_client_golden_at_every_split(name: str, client: str) -> None:
    data = fixture("gemini", name)
    folder, suffix, _ = ENCODERS[client]
    expected = norm(translate(client, [data]).decode())
    check_golden(f"gemini__to__{folder}/{name}.{suffix}", expected)
    for pieces in splits(data):
        assert norm(translate(client, pieces).decode()) == expected


def whole_answer(client: str, resp: ir.Response) -> tuple[int, dict[str, Any]]:
    """What a client that did not stream gets: its protocol's body, or its error body and status."""
    protocol = {"responses_plain": "responses", "gemini_array": "gemini"}.get(client, client)
    if resp.error is not None:
        side = registry.get(protocol).client
        return side.kind_status.get(resp.error.kind, resp.error.status), side.error_body(resp.error)
    if client == "chat_completions":
        return 200, chat_response.encode(resp, MODEL)
    if client == "messages":
        return 200, messages_response.encode(resp, MODEL)
    if client in ("responses", "responses_plain"):
        return 200, responses_response.encode(resp, RESPONSES_BODY, MODEL, set(), include_encrypted=client == "responses")
    return 200, gemini_response.encode(resp, MODEL)


@pytest.mark.parametrize("client", ["chat_completions", "messages", "responses", "responses_plain", "gemini"])
@pytest.mark.parametrize("name", NAMES)
def test_whole_answer_golden(name: str, client: str) -> None:
    status, body = whole_answer(client, said(name))
    folder, suffix, _ = ENCODERS[client]
    check_golden(f"gemini__to__{folder}/{name}.{suffix.replace('sse', 'json')}",
                 norm(json.dumps({"status": status, "body": body}, indent=1, ensure_ascii=False)) + "\n")
    if client == "gemini" and status == 200:
        types.GenerateContentResponse.model_validate(body)


# ------------------------------------------------------------ usage in Gemini's sense


@pytest.mark.parametrize("name", NAMES)
def test_usage_is_candidates_plus_thoughts(name: str) -> None:
    resp = said(name)
    meta = last_usage(name)
    if resp.usage is None:  # a blocked prompt is a failure before any answer: nothing to count
        assert resp.error is not None and resp.error.code == "SAFETY"
        return
    thoughts = meta.get("thoughtsTokenCount", 0)
    assert resp.usage.output_tokens == meta.get("candidatesTokenCount", 0) + thoughts
    assert resp.usage.reasoning_tokens == thoughts and resp.usage.input_tokens == meta["promptTokenCount"]


# ------------------------------------------------------------ what each SDK reads back


def chat_chunks(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(f[6:]) for f in data.split(b"\n\n") if f.startswith(b"data: {")]


@pytest.mark.parametrize("name", NAMES)
def test_openai_chat_sdk_reads_back_what_the_upstream_said(name: str) -> None:
    upstream = said(name)
    data = translate("chat_completions", [fixture("gemini", name)])
    got = read_chat_stream(data)
    if upstream.error is not None:
        assert got == ("error", upstream.error.message)
        return
    message = got.choices[0].message
    assert (message.content or "") == texts(upstream)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []] == calls(upstream)
    finish = {ir.STOP: "stop", ir.LENGTH: "length", ir.TOOL_CALLS: "tool_calls", ir.CONTENT_FILTER: "content_filter"}
    assert got.choices[0].finish_reason == finish[upstream.finish_reason or ir.STOP]
    assert upstream.usage is not None and got.usage.completion_tokens == upstream.usage.output_tokens
    assert got.usage.completion_tokens_details.reasoning_tokens == upstream.usage.reasoning_tokens
    # Signatures: a call's on that tool call (the first of parallel ones only), any other on the message.
    on_calls, on_message = [], []
    for chunk in chat_chunks(data):
        delta = chunk["choices"][0]["delta"] if chunk.get("choices") else {}
        if "extra_content" in delta:
            on_message.append(opened(delta["extra_content"]["google"]["thought_signature"]))
        for call in delta.get("tool_calls", []):
            if "id" in call:
                extra = call.get("extra_content")
                on_calls.append(opened(extra["google"]["thought_signature"]) if extra else None)
    sent = upstream_signatures(name)
    call_sigs = [s for kind, s in sent if kind == "call"]
    assert [s for s in on_calls if s] == call_sigs
    if call_sigs:
        assert on_calls[0] == call_sigs[0] and all(s is None for s in on_calls[1:])
    assert on_message == [s for kind, s in sent if kind != "call"]


@pytest.mark.parametrize("name", NAMES)
def test_anthropic_sdk_reads_back_what_the_upstream_said(name: str) -> None:
    upstream = said(name)
    read = read_anthropic_stream(translate("messages", [fixture("gemini", name)]))
    if upstream.error is not None:
        assert read.error is not None and read.error["error"]["message"] == upstream.error.message
        return
    message = read.message
    assert "".join(b.text for b in message.content if b.type == "text") == texts(upstream)
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == calls(upstream)
    assert [b.thinking for b in message.content if b.type == "thinking" and b.thinking] == thinking(upstream)
    assert message.stop_reason == STOP_REASON_FROM_FINISH[upstream.finish_reason or ir.STOP]
    assert upstream.usage is not None and message.usage.output_tokens == upstream.usage.output_tokens
    # Every Google signature in a thinking block's signature, in order; a call's in the block just before it.
    signed = [opened(b.signature) for b in message.content if b.type == "thinking" and not is_plain(b.signature)]
    expected = upstream_signatures(name)
    if expected and expected[-1][0] in ("text", "empty") and not any(k == "call" for k, _ in expected) \
            and expected[-1][1] not in [s for s in signed_before_text(name)]:
        # A text's signature after the answer's last word is left out for a Messages client (it would be a
        # thinking block after the text; Gemini does not validate it): messages/trailing_signatures.py.
        expected = expected[:-1]
    assert signed == [s for _, s in expected]
    for i, block in enumerate(message.content):
        if block.type == "tool_use" and i and message.content[i - 1].type == "thinking":
            assert gemini_from_envelope(message.content[i - 1].signature) is not None
    call_sigs = [s for kind, s in upstream_signatures(name) if kind == "call"]
    first_call = next((i for i, b in enumerate(message.content) if b.type == "tool_use"), None)
    if call_sigs:
        assert first_call and message.content[first_call - 1].type == "thinking"
        assert opened(message.content[first_call - 1].signature) == call_sigs[0]


def is_plain(signature: str) -> bool:
    """A signature the proxy minted for unsigned reasoning (not one of Gemini's, in its envelope)."""
    return is_minted(signature) and gemini_from_envelope(signature) is None


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
@pytest.mark.parametrize("name", NAMES)
def test_openai_responses_sdk_reads_back_what_the_upstream_said(name: str, encrypted: bool) -> None:
    upstream = said(name)
    read = read_responses_stream(translate("responses" if encrypted else "responses_plain", [fixture("gemini", name)]))
    if upstream.error is not None:
        assert read.error is not None and read.error["error"]["message"] == upstream.error.message
        assert read.events[-1]["type"] == "response.failed"
        return
    last = read.events[-1]["response"]
    if upstream.finish_reason in (ir.LENGTH, ir.CONTENT_FILTER):
        reason = "max_output_tokens" if upstream.finish_reason == ir.LENGTH else "content_filter"
        assert read.final is None and last["status"] == "incomplete"
        assert last["incomplete_details"] == {"reason": reason}
    else:
        assert read.final is not None and read.final.status == "completed"
        assert read.final.output_text == texts(upstream)
    output = last["output"]
    text = "".join(c["text"] for o in output if o["type"] == "message" for c in o["content"])
    assert text == texts(upstream)
    assert [(o["name"], json.loads(o["arguments"])) for o in output if o["type"] == "function_call"] == calls(upstream)
    reasoning = [o for o in output if o["type"] == "reasoning"]
    assert ["\n\n".join(s["text"] for s in o["summary"]) for o in reasoning if o["summary"]] == thinking(upstream)
    carried = [opened(o["encrypted_content"]) for o in reasoning if o.get("encrypted_content")]
    assert carried == ([s for _, s in upstream_signatures(name)] if encrypted else [])
    assert upstream.usage is not None and last["usage"]["output_tokens"] == upstream.usage.output_tokens
    assert last["usage"]["output_tokens_details"]["reasoning_tokens"] == upstream.usage.reasoning_tokens


def gemini_chunks(data: bytes, sse: bool) -> tuple[list[types.GenerateContentResponse], dict[str, Any] | None]:
    """Each chunk as google-genai's own type (a chunk it cannot parse fails), and a final bare error."""
    if sse:
        docs = [json.loads(f.removeprefix(b"data: ")) for f in data.split(b"\r\n\r\n") if f.strip()]
    else:
        docs = json.loads(data)
    error = docs.pop()["error"] if docs and "error" in docs[-1] else None
    if sse:  # a failure is the bare error object, never a `data:` event (framing.py)
        assert all(f.startswith(b"data: ") for f in data.split(b"\r\n\r\n")[:len(docs)])
    return [types.GenerateContentResponse.model_validate(d) for d in docs], error


@pytest.mark.parametrize("sse", [True, False], ids=["sse", "array"])
@pytest.mark.parametrize("name", NAMES)
def test_google_genai_reads_back_what_the_upstream_said(name: str, sse: bool) -> None:
    upstream = said(name)
    chunks, error = gemini_chunks(translate("gemini" if sse else "gemini_array", [fixture("gemini", name)]), sse)
    if upstream.error is not None:
        assert error is not None and error["message"] == upstream.error.message
        return
    assert error is None
    parts = [p for c in chunks for cand in c.candidates or [] if cand.content for p in cand.content.parts or []]
    assert "".join(p.text for p in parts if p.text and not p.thought) == texts(upstream)
    assert "".join(p.text for p in parts if p.text and p.thought) == "".join(thinking(upstream))
    assert [(p.function_call.name, p.function_call.args) for p in parts if p.function_call] == calls(upstream)
    final = chunks[-1]
    reason = final.candidates[0].finish_reason
    assert reason == {ir.LENGTH: "MAX_TOKENS", ir.CONTENT_FILTER: "SAFETY"}.get(upstream.finish_reason or "", "STOP")
    meta, sent = final.usage_metadata, last_usage(name)
    assert meta.candidates_token_count == sent.get("candidatesTokenCount", 0)
    assert (meta.thoughts_token_count or 0) == sent.get("thoughtsTokenCount", 0)
    assert meta.prompt_token_count == sent["promptTokenCount"]
    # Google's signatures ride in the proxy's own tokens, on non-thought parts, every one exactly once.
    carried = []
    for p in parts:
        if p.thought_signature:
            assert not p.thought
            token = base64.b64encode(p.thought_signature).decode()
            carried += [opened(r.signature) for r in carrier.unpack(token) or [] if r.signature]
    assert carried == [s for _, s in upstream_signatures(name)]


# ------------------------------------------------------------ other upstreams → a Gemini client

OTHER_UPSTREAMS: dict[str, Callable[[], Any]] = {
    "chat_completions": lambda: ChatStreamDecoder(expect_usage=True),
    "messages": MessagesStreamDecoder,
    "responses": ResponsesStreamDecoder,
}
REVERSE = [(up, name) for up in OTHER_UPSTREAMS for name in fixture_names(up)]


def to_gemini(upstream: str, pieces: list[bytes]) -> bytes:
    relay = Translation(OTHER_UPSTREAMS[upstream](), GeminiStreamEncoder(MODEL, sse=True))
    return run_frames(pieces, relay.feed, relay.close)


@pytest.mark.parametrize(("upstream", "name"), REVERSE)
def test_other_upstreams_to_a_gemini_client(upstream: str, name: str) -> None:
    data = fixture(upstream, name)
    out = to_gemini(upstream, [data])
    expected = norm(out.decode())
    check_golden(f"{upstream}__to__gemini/{name}.sse", expected)
    assert norm(to_gemini(upstream, [data[i:i + 1] for i in range(len(data))]).decode()) == expected
    decoder = OTHER_UPSTREAMS[upstream]()
    answer = fold(run_events([data], decoder.feed, decoder.close))
    chunks, error = gemini_chunks(out, sse=True)
    if answer.error is not None:
        assert error is not None and error["message"] == answer.error.message
        return
    assert error is None and chunks and chunks[-1].candidates[0].finish_reason is not None
    parts = [p for c in chunks for cand in c.candidates or [] if cand.content for p in cand.content.parts or []]
    assert "".join(p.text for p in parts if p.text and not p.thought) == texts(answer)
    # Gemini sends a call whole, so calls an upstream interleaved reach a Gemini client as each completes.
    assert sorted(p.function_call.name for p in parts if p.function_call) == sorted(n for n, _ in calls(answer))
    held = [r for p in parts if p.thought_signature for r in carrier.unpack(
        base64.b64encode(p.thought_signature).decode()) or []]
    assert [r.signature for r in held if r.signature] == \
        [p.signature for p in answer.output if isinstance(p, ReasoningPart) and p.signature]
