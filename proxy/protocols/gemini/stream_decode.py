"""A Gemini upstream's stream (`streamGenerateContent?alt=sse`) → internal events.

Each SSE event is a whole GenerateContentResponse holding the next parts; there is no `[DONE]` and no
block boundaries. Consecutive text parts are one text block, consecutive thought parts one reasoning
block; a function call arrives whole and becomes a tool block with its arguments in one delta.
Signatures (protocols.md §9.6): one on a thought part closes the reasoning block (`thought`); one on
an empty part closes the open reasoning block or makes one of its own (`empty`) — never dropped;
one on a call is a reasoning block of its own just before the call (`next`); one on text that is
already streaming follows that text (`prev`). The last event carries finishReason and usageMetadata
(earlier ones may carry partial usage: the last figures count); the stream's end finishes it, and a
stream that ends without a finishReason broke off. An `{"error": …}` event — `data:` or bare — is the
upstream's failure.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from proxy.config import Upstream
from proxy.ir.events import BlockStart, BlockStop, Cite, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.reasoning import gemini_envelope, gemini_origin
from proxy.ir.request import ReasoningPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo
from proxy.protocols.fields import obj, objects, text
from proxy.protocols.gemini import answer_parts
from proxy.protocols.gemini.errors import error_from_gemini
from proxy.protocols.gemini.vocabulary import usage_from_gemini
from proxy.protocols.sse import SSEEvent
from proxy.protocols.transcode import closed_early, parse_payload


class GeminiStreamDecoder:
    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream.name
        self._started = False
        self._done = False
        self._id = ""
        self._model = ""
        self._block = 0  # key of the next block
        self._open: tuple[int, str] | None = None  # (key, "text" | "reasoning")
        self._calls = 0
        self._finish: str | None = None

    def feed(self, sse: SSEEvent) -> list[Event]:
        if self._done or not sse.data.strip():
            return []
        payload = parse_payload(sse.data.decode("utf-8", "replace"), "event")
        if isinstance(payload, ErrorInfo):
            return self._fail(payload)
        error = error_from_gemini(payload) if "error" in payload else None
        if error is not None:
            return self._fail(error)
        events: list[Event] = []
        if not self._started:
            self._started = True
            self._id = text(payload, "responseId") or uuid.uuid4().hex
            self._model = text(payload, "modelVersion")
            events.append(Start(self._id, self._model, int(time.time())))
        blocked = answer_parts.blocked(payload)
        if blocked is not None:
            return events + self._fail(blocked)
        self._model = self._model or text(payload, "modelVersion")
        cand = answer_parts.candidate(payload)
        for part in objects(obj(cand, "content"), "parts"):
            events += self._part(part)
        for citation in answer_parts.citations(cand):
            if self._open is not None and self._open[1] == "text":
                events.append(Cite(citation, self._open[0]))
        usage = usage_from_gemini(payload.get("usageMetadata"))
        if usage is not None:
            events.append(UsageUpdate(usage))
        if text(cand, "finishReason"):
            self._finish = text(cand, "finishReason")
        return events

    def close(self) -> list[Event]:
        if self._done:
            return []
        self._done = True
        events = self._stop()
        if self._finish is None:
            return [*events, Failure(closed_early(self._started))]
        reason, failure = answer_parts.finish(self._finish, self._calls > 0)
        if failure is not None:
            return [*events, Failure(failure)]
        assert reason is not None
        return [*events, Finish(reason)]

    # ------------------------------------------------------------ parts

    def _part(self, part: dict[str, Any]) -> list[Event]:
        raw = part.get("thoughtSignature")
        signature = raw if isinstance(raw, str) and raw else None
        if part.get("thought") is True:
            events = self._into("reasoning")
            key = self._open[0] if self._open else 0
            if text(part, "text"):
                events.append(Delta(text(part, "text"), key))
            if signature:
                events += [Signature(signature=self._envelope(signature, "thought"), block=key), *self._stop()]
            return events
        if isinstance(part.get("functionCall"), dict):
            events = self._stop()
            if signature:
                events += self._signature_block(signature, "next")
            call = part["functionCall"]
            key = self._next_key()
            call_part = ToolCallPart(id=answer_parts.call_id(call, self._id, self._calls), name=text(call, "name"))
            self._calls += 1
            return [*events, BlockStart(call_part, key), Delta(answer_parts.arguments(call), key), BlockStop(key)]
        shown = text(part, "text") or answer_parts.image_markdown(part)
        if shown:
            events = self._into("text")
            key = self._open[0] if self._open else 0
            events.append(Delta(shown, key))
            if signature:  # on text already streaming: it follows that text
                events += [*self._stop(), *self._signature_block(signature, "prev")]
            return events
        if signature:  # an empty part that carries a signature: never dropped
            if self._open is not None and self._open[1] == "reasoning":
                key = self._open[0]
                return [Signature(signature=self._envelope(signature, "empty"), block=key), *self._stop()]
            return [*self._stop(), *self._signature_block(signature, "empty")]
        return []

    def _envelope(self, signature: str, placement: str) -> str:
        return gemini_envelope(signature, gemini_origin(self._upstream, self._model), placement)

    def _signature_block(self, signature: str, placement: str) -> list[Event]:
        key = self._next_key()
        return [BlockStart(ReasoningPart(), key), Signature(signature=self._envelope(signature, placement), block=key),
                BlockStop(key)]

    def _into(self, kind: str) -> list[Event]:
        """The open block is of `kind`: the one open already, or a new one (the other one stopped)."""
        if self._open is not None and self._open[1] == kind:
            return []
        events = self._stop()
        key = self._next_key()
        self._open = (key, kind)
        return [*events, BlockStart(TextPart("") if kind == "text" else ReasoningPart(), key)]

    def _stop(self) -> list[Event]:
        if self._open is None:
            return []
        key, self._open = self._open[0], None
        return [BlockStop(key)]

    def _next_key(self) -> int:
        self._block += 1
        return self._block

    def _fail(self, info: ErrorInfo) -> list[Event]:
        self._done = True
        return [Failure(info)]
