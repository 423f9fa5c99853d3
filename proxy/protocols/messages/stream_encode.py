"""Internal events → an Anthropic Messages stream, exactly as the real API and its clients expect.

Owns the client side of PROTOCOLS.md §2.3 as an explicit state machine:
`message_start` (full message, `content: []`, usage present — input tokens estimated locally until
the upstream reports them) → `ping` → blocks with indices 0, 1, 2…, each `content_block_start` →
deltas → `content_block_stop`, one at a time; a thinking block always ends with a `signature_delta`
(minted when the upstream has no signatures) → `message_delta` with the stop reason and the full
usage (Claude Code takes `input_tokens` from here) → `message_stop`. Every event is `event: <type>`
plus `data:` with the same `type`. A failure after the start closes the open block and sends
`event: error`; keepalives are `ping` events.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.custom_calls import CustomCallsAsFunctions
from proxy.ir.events import BlockStart, BlockStop, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.reasoning import encrypted_to_signature, mint_signature
from proxy.ir.request import OutputPart, ReasoningPart, ToolCallPart
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.messages.errors import stream_error_frame
from proxy.protocols.messages.response import STOP_REASONS, block, new_id, usage_body
from proxy.sse import named_frame

PING = named_frame("ping", {"type": "ping"})


class MessagesStreamEncoder:
    def __init__(self, model: str, input_estimate: int = 0) -> None:
        self.model = model
        self.done = False
        self._estimate = input_estimate
        self._usage = Usage()
        self._started = False
        self._index = -1
        self._open: OutputPart | None = None
        self._thinking: list[str] = []
        self._signed = False
        self._custom = CustomCallsAsFunctions()  # Anthropic clients get custom calls as tool_use

    def encode(self, ev: Event) -> list[bytes]:
        return [frame for one in self._custom.feed(ev) for frame in self._encode(one)]

    def _encode(self, ev: Event) -> list[bytes]:
        if self.done:
            return []
        if isinstance(ev, Delta):
            return self._delta(ev.text)
        if isinstance(ev, BlockStart):
            return self._block_start(ev.part)
        if isinstance(ev, BlockStop):
            return self._block_stop()
        if isinstance(ev, Signature):
            # A Responses upstream's encrypted reasoning travels as the signature (proxy.ir.reasoning).
            signature = ev.signature or (encrypted_to_signature(ev.encrypted) if ev.encrypted else None)
            if isinstance(self._open, ReasoningPart) and signature:
                self._signed = True
                return [self._event("content_block_delta", index=self._index,
                                    delta={"type": "signature_delta", "signature": signature})]
            return []
        if isinstance(ev, UsageUpdate):
            self._usage.merge(ev.usage)
            return []
        if isinstance(ev, Start):
            return self._start(ev)
        if isinstance(ev, Finish):
            return self._finish(ev)
        if isinstance(ev, Failure):
            return self.fail(ev.error)
        return []

    def keepalive(self) -> list[bytes]:
        return [PING]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.done:
            return []
        self.done = True
        frames = self._block_stop() if self._open is not None else []
        return [*frames, stream_error_frame(info)]

    # ------------------------------------------------------------ states

    def _start(self, ev: Start) -> list[bytes]:
        self._started = True
        if ev.usage is not None:
            self._usage.merge(ev.usage)
        usage = usage_body(self._usage)
        if not self._usage.input_tokens:
            usage["input_tokens"] = self._estimate
        usage["output_tokens"] = max(usage["output_tokens"], 1)
        message: dict[str, Any] = {
            "id": ev.id if ev.id.startswith("msg_") else new_id(), "type": "message", "role": "assistant",
            "model": self.model, "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage,
        }
        return [self._event("message_start", message=message), PING]

    def _block_start(self, part: OutputPart) -> list[bytes]:
        self._index += 1
        self._open = part
        self._thinking = []
        self._signed = False
        content: dict[str, Any]
        if isinstance(part, ReasoningPart) and part.redacted is None:
            content = {"type": "thinking", "thinking": "", "signature": ""}
        elif isinstance(part, ToolCallPart):
            content = {**block(part), "input": {}}
        else:
            content = block(part)
            if content["type"] == "text":
                content["text"] = ""
        return [self._event("content_block_start", index=self._index, content_block=content)]

    def _delta(self, text: str) -> list[bytes]:
        part = self._open
        if not text or part is None:
            return []
        if isinstance(part, ToolCallPart):
            delta = {"type": "input_json_delta", "partial_json": text}
        elif isinstance(part, ReasoningPart):
            if part.redacted is not None:
                return []
            self._thinking.append(text)
            delta = {"type": "thinking_delta", "thinking": text}
        else:
            delta = {"type": "text_delta", "text": text}
        return [self._event("content_block_delta", index=self._index, delta=delta)]

    def _block_stop(self) -> list[bytes]:
        frames = []
        part = self._open
        if isinstance(part, ReasoningPart) and part.redacted is None and not self._signed:
            # Clients expect every thinking block to be signed; the upstream gave us nothing to sign with.
            signature = mint_signature("".join(self._thinking))
            frames.append(self._event("content_block_delta", index=self._index,
                                      delta={"type": "signature_delta", "signature": signature}))
        self._open = None
        frames.append(self._event("content_block_stop", index=self._index))
        return frames

    def _finish(self, ev: Finish) -> list[bytes]:
        self.done = True
        usage = usage_body(self._usage)
        if not self._usage.input_tokens:
            usage["input_tokens"] = self._estimate
        delta = {"stop_reason": STOP_REASONS.get(ev.reason, "end_turn"),
                 "stop_sequence": ev.stop_sequence if ev.reason == "stop_sequence" else None}
        return [self._event("message_delta", delta=delta, usage=usage), self._event("message_stop")]

    @staticmethod
    def _event(kind: str, **fields: Any) -> bytes:
        return named_frame(kind, {"type": kind, **fields})
