r"""Internal events → a Gemini `streamGenerateContent` stream, as google-genai (Python) and
@google/genai (JS, inside gemini-cli) read it.

Each chunk is a whole `GenerateContentResponse` with one part: a text delta → `{"text"}`, a
reasoning delta → `{"text", "thought": true}` (only when the client asked for thoughts), a tool
call → one `{"functionCall"}` part sent at its BlockStop (Gemini never streams arguments). The
reasoning's tokens ride as `thoughtSignature` on the next non-thought part (`carrier`). The last
chunk has `finishReason`, `usageMetadata` and an empty text part (carrying any token still held):
google-genai's chat helper drops a turn any of whose chunks has no part, and gemini-cli skips an
empty text part while still reading the finish reason. Every chunk has `modelVersion` and
`responseId`, as Google's do. Citations go on the last chunk, offsets in bytes of the text.

Framing is `framing`'s (SSE events `data: <json>` + CRLF CRLF, no [DONE]; or one JSON array
written as it goes; a blank-line keepalive; a failure as the bare error object), which this
encoder feeds with JSON it has already written, U+2028 / U+2029 escaped: JavaScript's `.` does not
match them, so a raw one in a chunk would stop @google/genai's older regex
(`^\s*data: (.*)(?:\n\n|\r\r|\r\n\r\n)`, the parser inside gemini-cli 0.61) from ever matching
that event. What the SDKs' parsers do with each choice is checked by
tests/unit/test_gemini_client_codec.py: google-genai's own (`google/genai/_api_client.py`,
`_SseLineDecoder` and `HttpResponse._iter_response_stream`) through its public API, and the two
JavaScript loops (gemini-cli's bundled one and js-genai's `src/_api_client.ts`
`processStreamResponse`) re-implemented and run under node, at every byte split. Found there:
an SSE comment (`: keepalive`) is handed to google-genai's raw-JSON buffer (`_RawJsonLineBuffer`)
and raises UnknownApiResponseError, and leaves the gemini-cli regex unmatched for good; a blank
line is skipped by google-genai (an empty line with no data buffered), eaten by the regex's
leading `\s*` and trimmed away by js-genai. Both take CRLF and LF; CRLF is what Google sends.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.events import BlockStart, BlockStop, Cite, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.request import OutputPart, ReasoningPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.gemini import carrier
from proxy.protocols.gemini.errors import error_body
from proxy.protocols.gemini.framing import JSON_ARRAY_CONTENT_TYPE, SSE_KEEPALIVE, ArrayWriter, sse_error, sse_frame
from proxy.protocols.gemini.response import candidate, citation_entry, finish_reason, function_call, new_id
from proxy.protocols.gemini.vocabulary import usage_to_gemini
from proxy.protocols.sse import dumps


def frame_json(obj: Any) -> bytes:
    """Compact JSON with the two line separators JavaScript's regex `.` does not match escaped."""
    return dumps(obj).replace("\u2028".encode(), b"\\u2028").replace("\u2029".encode(), b"\\u2029")


class _Block:
    __slots__ = ("encrypted", "offset", "part", "signature", "text")

    def __init__(self, part: OutputPart, offset: int) -> None:
        self.part = part
        self.text: list[str] = []
        self.offset = offset  # bytes of answer text before this block (text blocks: citation offsets)
        self.signature: str | None = None
        self.encrypted: str | None = None


class GeminiStreamEncoder:
    def __init__(self, model: str, sse: bool, include_thoughts: bool = True) -> None:
        self.model = model
        self.sse = sse
        self.include_thoughts = include_thoughts
        self.done = False
        self.final: dict[str, Any] | None = None  # Gemini keeps no conversation on the proxy
        self.dropped: dict[str, int] = {}
        self._id = new_id()
        self._usage = Usage()
        self._array = None if sse else ArrayWriter()
        # The array form is JSON, not SSE (proxy.relay.attempt.stream_headers reads this).
        self.content_type = None if sse else JSON_ARRAY_CONTENT_TYPE
        self._blocks: dict[int, _Block] = {}
        self._held: list[ReasoningPart] = []
        self._offset = 0
        self._citations: list[dict[str, Any]] = []
        self._said = False  # any part went out

    def encode(self, ev: Event) -> list[bytes]:
        if self.done:
            return []
        if isinstance(ev, Delta):
            return self._delta(ev)
        if isinstance(ev, BlockStart):
            self._blocks[ev.block] = _Block(ev.part, self._offset)
            return []
        if isinstance(ev, BlockStop):
            return self._block_stop(ev.block)
        if isinstance(ev, Signature):
            block = self._blocks.get(ev.block)
            if block is not None and isinstance(block.part, ReasoningPart):
                block.signature = ev.signature or block.signature
                block.encrypted = ev.encrypted or block.encrypted
            return []
        if isinstance(ev, Cite):
            block = self._blocks.get(ev.block)
            if block is not None and isinstance(block.part, TextPart):
                entry = citation_entry(ev.citation, "".join(block.text), block.offset)
                if entry is not None:
                    self._citations.append(entry)
            return []
        if isinstance(ev, UsageUpdate):
            self._usage.merge(ev.usage)
            return []
        if isinstance(ev, Start):
            if ev.id:
                self._id = ev.id
            if ev.usage is not None:
                self._usage.merge(ev.usage)
            return []
        if isinstance(ev, Finish):
            return self._finish(ev.reason)
        if isinstance(ev, Failure):
            return self.fail(ev.error)
        return []

    def keepalive(self) -> list[bytes]:
        if self.done:
            return []
        return [SSE_KEEPALIVE if self._array is None else self._array.keepalive()]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.done:
            return []
        self.done = True
        if self._array is None:
            return [sse_error(error_body(info))]
        return [self._array.element(frame_json(error_body(info))), self._array.end()]

    # ------------------------------------------------------------ states

    def _delta(self, ev: Delta) -> list[bytes]:
        block = self._blocks.get(ev.block)
        if block is None or not ev.text:
            return []
        part = block.part
        if isinstance(part, ToolCallPart):
            block.text.append(ev.text)
            return []
        if isinstance(part, ReasoningPart):
            if part.redacted is not None:
                return []
            block.text.append(ev.text)
            return [self._chunk({"text": ev.text, "thought": True})] if self.include_thoughts else []
        if isinstance(part, TextPart):
            block.text.append(ev.text)
        self._offset += len(ev.text.encode("utf-8"))
        return [self._chunk(self._carrying({"text": ev.text}))]

    def _block_stop(self, key: int) -> list[bytes]:
        block = self._blocks.pop(key, None)
        if block is None:
            return []
        part = block.part
        if isinstance(part, ReasoningPart):
            done = ReasoningPart(text="".join(block.text), signature=block.signature or part.signature,
                                 redacted=part.redacted, encrypted=block.encrypted or part.encrypted, id=part.id)
            if carrier.worth_carrying(done):
                self._held.append(done)
            if done.text and not self.include_thoughts:
                self.dropped["reasoning"] = self.dropped.get("reasoning", 0) + 1
            return []
        if isinstance(part, ToolCallPart):
            call = ToolCallPart(id=part.id, name=part.name, arguments="".join(block.text) or part.arguments,
                                kind=part.kind)
            return [self._chunk(self._carrying(function_call(call)))]
        return []

    def _carrying(self, part: dict[str, Any]) -> dict[str, Any]:
        """The part, with the tokens of the reasoning held since the last one that went out."""
        if self._held:
            part["thoughtSignature"] = carrier.pack(self._held)
            self._held = []
        return part

    def _finish(self, reason: str) -> list[bytes]:
        gemini_reason = finish_reason(reason)
        parts = [self._carrying({"text": ""})] if self._held or self._said or gemini_reason != "SAFETY" else []
        body = self._body(candidate(parts, gemini_reason, self._citations))
        body["usageMetadata"] = usage_to_gemini(self._usage)
        frames = [self._frame(body)]
        self.done = True
        if self._array is not None:
            frames.append(self._array.end())
        return frames

    def _chunk(self, part: dict[str, Any]) -> bytes:
        self._said = True
        return self._frame(self._body({"content": {"role": "model", "parts": [part]}, "index": 0}))

    def _body(self, cand: dict[str, Any]) -> dict[str, Any]:
        return {"candidates": [cand], "modelVersion": self.model, "responseId": self._id}

    def _frame(self, obj: dict[str, Any]) -> bytes:
        data = frame_json(obj)
        return sse_frame(data) if self._array is None else self._array.element(data)
