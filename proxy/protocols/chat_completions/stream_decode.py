"""Chat Completions stream → internal events, with the sequencing Chat itself does not have.

Owns reading an OpenAI-compatible upstream's chunks into the IR event stream of `proxy.ir.events`,
one block open at a time (under one key). Chat interleaves freely — reasoning, text and the argument
fragments of parallel tool calls may alternate — while the real Messages and Responses APIs stream
one block at a time, and Codex runs a tool call as soon as its item is done. So this decoder keeps
one block open and buffers fragments of any other block until the open one can close: a text or
reasoning block can always close; a tool call can close once its arguments parse as complete
JSON (nothing valid can follow a complete JSON object), or when the upstream finishes.

Quirks handled here, once, for every client: chunks without `index` on tool calls, ids and names
repeated in every delta, names that arrive after the first fragment, `finish_reason: "stop"`
after tool calls, usage on a chunk with choices or only in the final chunk, a stream that just
closes after its finish reason, and `reasoning` as DeepSeek's or OpenRouter's field name.
`annotations` on a delta (url_citation, from search models) become citations of the text block
open when they arrive.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from proxy.ir import response as ir
from proxy.ir.events import BlockStart, BlockStop, Cite, Delta, Event, Failure, Finish, Start, UsageUpdate
from proxy.ir.request import OutputPart, ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo
from proxy.protocols.chat_completions.chunks import (
    arguments_text,
    done_before_any_chunk,
    error_in_chunk,
    infer_tool_index,
)
from proxy.protocols.chat_completions.response import citations_from_chat, new_call_id, new_id
from proxy.protocols.chat_completions.vocabulary import finish_from_chat, matched_stop, usage_from_chat
from proxy.protocols.fields import count
from proxy.protocols.sse import SSEEvent
from proxy.protocols.transcode import closed_early, parse_payload

# Block keys: the three kinds of running text, or the upstream's index of a tool call.
Key = str | int


@dataclass(slots=True)
class _ToolCall:
    id: str = ""
    name: str = ""
    kind: str = "function"
    arguments: list[str] = field(default_factory=list)  # every fragment so far
    checked_len: int = -1  # arguments length at the last completeness check
    complete: bool = False


class ChatStreamDecoder:
    def __init__(self, expect_usage: bool = True) -> None:
        self._expect_usage = expect_usage  # we asked the upstream for a usage chunk
        self._started = False
        self._done = False
        self._finish: str | None = None  # raw finish_reason, held until usage arrives
        self._stop_sequence: str | None = None
        self._usage_seen = False
        self._open: Key | None = None
        self._tools: dict[int, _ToolCall] = {}
        self._pending: list[Key] = []  # blocks waiting for the open one to close, in arrival order
        self._buffers: dict[Key, list[str]] = {}
        self._content_seen = 0  # characters of content so far: citations count their offsets in it
        self._text_from = 0  # where in the content the current text block began

    # ------------------------------------------------------------ public

    def feed(self, sse: SSEEvent) -> list[Event]:
        if self._done:
            return []
        data = sse.data.strip()
        if not data:
            return []
        out: list[Event] = []
        if data == b"[DONE]":
            self._end(out)
            return out
        chunk = parse_payload(data.decode("utf-8", "replace"), "chunk")  # a sloppy server's broken character: U+FFFD
        if isinstance(chunk, ErrorInfo):
            return self._fail_with(out, chunk)
        if chunk.get("error"):
            self._start(chunk, out)
            return self._fail_with(out, error_in_chunk(chunk))
        self._start(chunk, out)
        # Usage first: when it rides on the finishing chunk, it must come before the Finish.
        usage = usage_from_chat(chunk.get("usage"))
        if usage is not None:
            self._usage_seen = True
            out.append(UsageUpdate(usage))
        choices = chunk.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict) and choice.get("index", 0) == 0 and not self._done:
                    self._choice(choice, out)
        if usage is not None and self._finish is not None and not self._done:
            self._end(out)
        return out

    def close(self) -> list[Event]:
        """The upstream stream ended: finish what it left open, or report that it broke off."""
        out: list[Event] = []
        if self._done:
            return out
        if self._finish is not None:
            self._end(out)
        else:
            self._fail_with(out, closed_early(self._started))
        return out

    # ------------------------------------------------------------ chunks

    def _start(self, chunk: dict[str, Any], out: list[Event]) -> None:
        if self._started:
            return
        self._started = True
        out.append(Start(
            id=str(chunk.get("id") or new_id()),
            model=str(chunk.get("model") or ""),
            created=count(chunk.get("created")) or int(time.time()),
        ))

    def _choice(self, choice: dict[str, Any], out: list[Event]) -> None:
        delta = choice.get("delta") or choice.get("message") or {}
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning_content")
            if reasoning is None:
                reasoning = delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._emit("reasoning", reasoning, out)
            content = delta.get("content")
            if isinstance(content, str) and content:
                if self._open != "text" and "text" not in self._pending:
                    self._text_from = self._content_seen
                self._content_seen += len(content)
                self._emit("text", content, out)
            annotations = delta.get("annotations")
            if annotations and self._open == "text":
                out += [Cite(c) for c in citations_from_chat(annotations, self._text_from)]
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self._emit("refusal", refusal, out)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for entry in calls:
                    if isinstance(entry, dict):
                        self._tool_fragment(entry, out)
        reason = choice.get("finish_reason")
        if reason and self._finish is None:
            self._finish = str(reason)
            self._stop_sequence = matched_stop(choice)
            self._flush_all(out)
            if self._usage_seen or not self._expect_usage:
                self._end(out)

    def _tool_fragment(self, entry: dict[str, Any], out: list[Event]) -> None:
        index = entry.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = infer_tool_index(entry.get("id"), {t.id: i for i, t in self._tools.items() if t.id}, self._tools)
        tool = self._tools.get(index)
        if tool is None:
            tool = self._tools[index] = _ToolCall()
        if entry.get("id") and not tool.id:
            tool.id = str(entry["id"])
        if entry.get("type") == "custom" or isinstance(entry.get("custom"), dict):
            tool.kind = "custom"
            body = entry.get("custom")
            key = "input"
        else:
            body = entry.get("function")
            key = "arguments"
        body = body if isinstance(body, dict) else {}
        name, fragment = body.get("name"), body.get(key)
        if name and not tool.name:
            tool.name = str(name)
        if not isinstance(fragment, str):
            fragment = arguments_text(fragment)
        if fragment:
            tool.arguments.append(fragment)
        self._emit(index, fragment, out)

    # ------------------------------------------------------------ sequencing

    def _emit(self, key: Key, text: str, out: list[Event]) -> None:
        """Deliver `text` to block `key`, opening it if possible, else buffering it."""
        if self._open != key:
            if key not in self._pending:
                self._pending.append(key)
            if text:
                self._buffers.setdefault(key, []).append(text)
            self._advance(out, force=False)
            return
        if text:
            out.append(Delta(text))

    def _advance(self, out: list[Event], force: bool) -> None:
        """Open pending blocks in arrival order while the open one can close."""
        while self._pending:
            if self._open is not None:
                if not force and not self._closable(self._open):
                    return
                out.append(BlockStop())
                self._open = None
            key = self._pending[0]
            if isinstance(key, int) and not self._tools[key].name and not force:
                return  # a tool call cannot start before its name is known
            self._pending.pop(0)
            self._open = key
            out.append(BlockStart(self._skeleton(key)))
            buffered = self._buffers.pop(key, None)
            if buffered:
                out.append(Delta("".join(buffered)))

    def _closable(self, key: Key) -> bool:
        if not isinstance(key, int):
            return True
        tool = self._tools[key]
        if tool.kind == "custom" or tool.complete:
            return True  # custom input is free text: nothing tells us it is complete, so never hold it
        length = sum(len(a) for a in tool.arguments)
        if length != tool.checked_len:
            tool.checked_len = length
            try:
                tool.complete = isinstance(json.loads("".join(tool.arguments)), dict)
            except ValueError:
                tool.complete = False
        return tool.complete

    def _skeleton(self, key: Key) -> OutputPart:
        if key == "text":
            return TextPart("")
        if key == "reasoning":
            return ReasoningPart()
        if key == "refusal":
            return RefusalPart("")
        assert isinstance(key, int)
        tool = self._tools[key]
        if not tool.id:
            tool.id = new_call_id()
        return ToolCallPart(id=tool.id, name=tool.name, kind=tool.kind)  # type: ignore[arg-type]

    def _flush_all(self, out: list[Event]) -> None:
        self._advance(out, force=True)
        if self._open is not None:
            out.append(BlockStop())
            self._open = None

    # ------------------------------------------------------------ endings

    def _end(self, out: list[Event]) -> None:
        self._flush_all(out)
        if not self._started:
            self._fail_with(out, done_before_any_chunk())
            return
        self._done = True
        reason = finish_from_chat(self._finish or "stop", bool(self._tools))
        if reason == ir.STOP and self._stop_sequence is not None:
            out.append(Finish(ir.STOP_SEQUENCE, self._stop_sequence))
        else:
            out.append(Finish(reason))

    def _fail_with(self, out: list[Event], info: ErrorInfo) -> list[Event]:
        self._done = True
        out.append(Failure(info))
        return out
