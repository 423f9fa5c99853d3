"""Internal events → an Anthropic Messages stream, exactly as the real API and its clients expect.

Owns the client side of the Messages stream as an explicit state machine:
`message_start` (full message, `content: []`, usage present — input tokens estimated locally until
the upstream reports them) → `ping` → blocks with indices 0, 1, 2…, each `content_block_start` →
deltas → `content_block_stop`, one at a time (blocks an upstream interleaved are put one after
another by `proxy.ir.sequence`); text citations as `citations_delta`; a thinking block always
ends with a `signature_delta`
(minted when the upstream has no signatures) → `message_delta` with the stop reason and the full
usage (Claude Code takes `input_tokens` from here) → `message_stop`. Every event is `event: <type>`
plus `data:` with the same `type`. A failure after the start closes the open block and sends
`event: error`; keepalives are `ping` events. For a client that did not enable `thinking`,
reasoning blocks are left out (`proxy.ir.drop_reasoning`) and counted in its `dropped`.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.custom_calls import CustomCallsAsFunctions
from proxy.ir.drop_reasoning import WithoutReasoning
from proxy.ir.events import BlockStart, BlockStop, Cite, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.reasoning import encrypted_to_signature, mint_signature
from proxy.ir.request import OutputPart, ReasoningPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo, Usage
from proxy.ir.sequence import Sequencer
from proxy.protocols.messages.citations import citation_to_anthropic
from proxy.protocols.messages.errors import stream_error_frame
from proxy.protocols.messages.response import block, new_id
from proxy.protocols.messages.trailing_signatures import TrailingSignatures
from proxy.protocols.messages.vocabulary import STOP_REASON_FROM_FINISH, usage_to_anthropic
from proxy.protocols.sse import named_frame

PING = named_frame("ping", {"type": "ping"})


class MessagesStreamEncoder:
    def __init__(self, model: str, input_estimate: int = 0, thinking: bool = True) -> None:
        self.model = model
        self.done = False
        self.final: dict[str, Any] | None = None  # Messages keeps no conversation on the proxy
        self.dropped: dict[str, int] = {}  # what is left out for this client, for the request's log line
        self._estimate = input_estimate
        self._usage = Usage()
        self._started = False
        self._index = -1
        self._open: OutputPart | None = None
        self._text: list[str] = []  # the open block's text (thinking, to sign; text, to cite)
        self._signed = False
        self._custom = CustomCallsAsFunctions()  # Anthropic clients get custom calls as tool_use
        self._sequencer = Sequencer()
        self._no_reasoning = None if thinking else WithoutReasoning(self.dropped)
        self._trailing = TrailingSignatures(self.dropped)

    def encode(self, ev: Event) -> list[bytes]:
        # Most events are text deltas of the block being relayed: no filter has anything to do.
        if ev.__class__ is Delta and self._sequencer.is_live(ev.block) and self._no_reasoning is None \
                and not self._custom.holding:
            return self._delta(ev.text) if not self.done else []
        events = self._no_reasoning.feed(ev) if self._no_reasoning is not None else [ev]
        events = [kept for one in events for kept in self._trailing.feed(one)]
        return [frame for one in events for custom in self._custom.feed(one)
                for ordered in self._sequencer.feed(custom) for frame in self._encode(ordered)]

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
        if isinstance(ev, Cite):
            if not isinstance(self._open, TextPart):
                return []
            citation = citation_to_anthropic(ev.citation, "".join(self._text))
            if citation is None:
                return []
            return [self._event("content_block_delta", index=self._index,
                                delta={"type": "citations_delta", "citation": citation})]
        if isinstance(ev, UsageUpdate):
            self._usage.merge(ev.usage)
            return []
        if isinstance(ev, Start):
            return self._start(ev)
        if isinstance(ev, Finish):
            return self._finish(ev)
        if isinstance(ev, Failure):
            return self._fail(ev.error)
        return []

    def keepalive(self) -> list[bytes]:
        return [PING]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        # Through the filters, so that blocks the sequencer holds reach the client before the error.
        return self.encode(Failure(info)) if not self.done else []

    def _fail(self, info: ErrorInfo) -> list[bytes]:
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
        usage = usage_to_anthropic(self._usage)
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
        self._text = []
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
            self._text.append(text)
            delta = {"type": "thinking_delta", "thinking": text}
        else:
            self._text.append(text)
            delta = {"type": "text_delta", "text": text}
        return [self._event("content_block_delta", index=self._index, delta=delta)]

    def _block_stop(self) -> list[bytes]:
        frames = []
        part = self._open
        if isinstance(part, ReasoningPart) and part.redacted is None and not self._signed:
            # Clients expect every thinking block to be signed; the upstream gave us nothing to sign with.
            signature = mint_signature("".join(self._text))
            frames.append(self._event("content_block_delta", index=self._index,
                                      delta={"type": "signature_delta", "signature": signature}))
        self._open = None
        frames.append(self._event("content_block_stop", index=self._index))
        return frames

    def _finish(self, ev: Finish) -> list[bytes]:
        self.done = True
        usage = usage_to_anthropic(self._usage)
        if not self._usage.input_tokens:
            usage["input_tokens"] = self._estimate
        delta = {"stop_reason": STOP_REASON_FROM_FINISH.get(ev.reason, "end_turn"),
                 "stop_sequence": ev.stop_sequence if ev.reason == "stop_sequence" else None}
        return [self._event("message_delta", delta=delta, usage=usage), self._event("message_stop")]

    @staticmethod
    def _event(kind: str, **fields: Any) -> bytes:
        return named_frame(kind, {"type": kind, **fields})
