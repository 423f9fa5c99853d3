"""Internal events → a Chat Completions stream, exactly as the real API frames it.

Owns the client side of PROTOCOLS.md §1.3: the first chunk carries `role` once; a tool call's
first delta carries index, id, type and name with `"arguments": ""`, later ones only index and
argument text (openai-python's helper concatenates repeated strings); `finish_reason` appears
once; with `include_usage` every chunk has `"usage": null` and the usage comes in a final chunk
with `choices: []`; `data: [DONE]` always ends the stream, after an error chunk too.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import time
from typing import Any

from proxy.ir.custom_calls import CustomCallsAsFunctions
from proxy.ir.events import BlockStart, Delta, Event, Failure, Finish, Start, UsageUpdate
from proxy.ir.request import OutputPart, ReasoningPart, RefusalPart, ToolCallPart
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.chat_completions.errors import stream_error_frames
from proxy.protocols.chat_completions.response import FINISH_TO_CHAT, new_id, usage_to_chat
from proxy.sse import DONE_FRAME, KEEPALIVE_COMMENT, data_frame


class ChatStreamEncoder:
    def __init__(self, model: str, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self.done = False
        self._id = new_id()
        self._created = int(time.time())
        self._open: OutputPart | None = None
        self._tool_index = -1
        self._usage = Usage()
        self._custom = CustomCallsAsFunctions()  # Chat clients get custom calls as functions

    def encode(self, ev: Event) -> list[bytes]:
        return [frame for one in self._custom.feed(ev) for frame in self._encode(one)]

    def _encode(self, ev: Event) -> list[bytes]:
        if self.done:
            return []
        if isinstance(ev, Delta):
            if not ev.text:
                return []
            part = self._open
            if isinstance(part, ToolCallPart):
                return [self._chunk({"tool_calls": [{"index": self._tool_index,
                                                     "function": {"arguments": ev.text}}]})]
            if isinstance(part, ReasoningPart):
                return [self._chunk({"reasoning_content": ev.text})]
            if isinstance(part, RefusalPart):
                return [self._chunk({"refusal": ev.text})]
            return [self._chunk({"content": ev.text})]
        if isinstance(ev, BlockStart):
            self._open = ev.part
            if isinstance(ev.part, ToolCallPart):
                self._tool_index += 1
                call = {"index": self._tool_index, "id": ev.part.id, "type": "function",
                        "function": {"name": ev.part.name, "arguments": ""}}
                return [self._chunk({"tool_calls": [call]})]
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
            frames = [self._chunk({}, FINISH_TO_CHAT.get(ev.reason, "stop"))]
            if self.include_usage:
                frames.append(data_frame(self._base([], usage_to_chat(self._usage))))
            frames.append(DONE_FRAME)
            return frames
        if isinstance(ev, Failure):
            return self.fail(ev.error)
        return []  # BlockStop and Signature have no Chat spelling

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
