"""Internal events → a Chat Completions stream, exactly as the real API frames it.

Owns the client side of docs/protocols.md §3.3: the first chunk carries `role` once; a tool call's
first delta carries index, id, type and name with `"arguments": ""`, later ones only index and
argument text (openai-python's helper concatenates repeated strings); `finish_reason` appears
once; with `include_usage` every chunk has `"usage": null` and the usage comes in a final chunk
with `choices: []`; `data: [DONE]` ends a finished stream. A stream that fails after its first
byte ends with the error chunk and **no** `[DONE]`, as the real API does, so that a client waiting
for `[DONE]` knows the answer was cut. Blocks that arrive interleaved stay interleaved: text and
reasoning deltas carry no key in Chat, and each tool call keeps its own `index` (numbered in the
order calls start). Citations on text (url_citation annotations, offsets counted in the whole
message's content) go out in one delta chunk before the finish chunk, as `annotations`.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from proxy.ir.custom_calls import CustomCallsAsFunctions
from proxy.ir.events import BlockStart, BlockStop, Cite, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.request import Citation, OutputPart, ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.chat_completions import signatures
from proxy.protocols.chat_completions.errors import stream_error_frames
from proxy.protocols.chat_completions.response import annotation, new_id
from proxy.protocols.chat_completions.vocabulary import FINISH_TO_CHAT, usage_to_chat
from proxy.protocols.sse import DONE_FRAME, KEEPALIVE_COMMENT, data_frame
from proxy.protocols.transcode import NOTHING_DROPPED


class ChatStreamEncoder:
    def __init__(self, model: str, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self.done = False
        self.final: dict[str, Any] | None = None  # Chat keeps no conversation on the proxy
        self.dropped: Mapping[str, int] = NOTHING_DROPPED  # it leaves nothing out
        self._id = new_id()
        self._created = int(time.time())
        self._open: dict[int, OutputPart] = {}  # open blocks by key
        self._tool_index: dict[int, int] = {}  # open tool-call blocks' Chat index, by key
        self._tools = 0  # tool calls started so far
        self._content_len = 0  # characters of content sent so far: where a text block's citations start
        self._text_start: dict[int, int] = {}  # open text blocks' offset in the content
        self._cites: dict[int, list[Citation]] = {}  # open text blocks' citations
        self._annotations: list[dict[str, Any]] = []
        self._usage = Usage()
        self._custom = CustomCallsAsFunctions()  # Chat clients get custom calls as functions
        self._call_signature: str | None = None  # a Gemini signature for the next tool call (signatures.py)

    def encode(self, ev: Event) -> list[bytes]:
        return [frame for one in self._custom.feed(ev) for frame in self._encode(one)]

    def _encode(self, ev: Event) -> list[bytes]:
        if self.done:
            return []
        if isinstance(ev, Delta):
            if not ev.text:
                return []
            part = self._open.get(ev.block)
            if isinstance(part, ToolCallPart):
                return [self._chunk({"tool_calls": [{"index": self._tool_index[ev.block],
                                                     "function": {"arguments": ev.text}}]})]
            if isinstance(part, ReasoningPart):
                return [self._chunk({"reasoning_content": ev.text})]
            if isinstance(part, RefusalPart):
                return [self._chunk({"refusal": ev.text})]
            if part is None:
                return []
            self._content_len += len(ev.text)
            return [self._chunk({"content": ev.text})]
        if isinstance(ev, BlockStart):
            self._open[ev.block] = ev.part
            if isinstance(ev.part, ToolCallPart):
                index = self._tool_index[ev.block] = self._tools
                self._tools += 1
                call = {"index": index, "id": ev.part.id, "type": "function",
                        "function": {"name": ev.part.name, "arguments": ""}}
                if self._call_signature is not None:
                    call[signatures.FIELD] = signatures.carried(self._call_signature)
                    self._call_signature = None
                return [self._chunk({"tool_calls": [call]})]
            if isinstance(ev.part, TextPart):
                self._text_start[ev.block] = self._content_len
            return []
        if isinstance(ev, BlockStop):
            self._open.pop(ev.block, None)
            self._tool_index.pop(ev.block, None)
            start = self._text_start.pop(ev.block, 0)
            for citation in self._cites.pop(ev.block, ()):
                found = annotation(citation, start, self._content_len)
                if found is not None:
                    self._annotations.append(found)
            return []
        if isinstance(ev, Cite):
            if ev.block in self._text_start:
                self._cites.setdefault(ev.block, []).append(ev.citation)
            return []
        if isinstance(ev, Start):
            if ev.id.startswith("chatcmpl-"):
                self._id = ev.id
            self._created = ev.created or self._created
            if ev.usage is not None:
                self._usage.merge(ev.usage)
            return [self._chunk({"role": "assistant", "content": "", "refusal": None})]
        if isinstance(ev, UsageUpdate):
            self._usage.merge(ev.usage)
            return []
        if isinstance(ev, Finish):
            self.done = True
            frames = []
            if self._call_signature is not None:  # no call came after it: it belongs to the message
                frames.append(self._chunk({signatures.FIELD: signatures.carried(self._call_signature)}))
            if self._annotations:
                frames.append(self._chunk({"annotations": self._annotations}))
            frames.append(self._chunk({}, FINISH_TO_CHAT.get(ev.reason, "stop")))
            if self.include_usage:
                frames.append(data_frame(self._base([], usage_to_chat(self._usage))))
            frames.append(DONE_FRAME)
            return frames
        if isinstance(ev, Failure):
            return self.fail(ev.error)
        if isinstance(ev, Signature) and ev.signature and signatures.placement(ev.signature):
            # A Gemini signature: on the next tool call when it belongs to the part after it, else on
            # the message (signatures.py).
            if signatures.placement(ev.signature) == "next":
                self._call_signature = ev.signature
                return []
            return [self._chunk({signatures.FIELD: signatures.carried(ev.signature)})]
        return []  # other signatures have no Chat spelling

    def keepalive(self) -> list[bytes]:
        return [KEEPALIVE_COMMENT]  # a comment: openai-python json-decodes every data-bearing event

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.done:
            return []
        self.done = True
        return stream_error_frames(info)

    def _base(self, choices: list[dict[str, Any]], usage: Any = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                                 "model": self.model, "choices": choices}
        if self.include_usage:
            chunk["usage"] = usage
        return chunk

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return data_frame(self._base([choice]))
