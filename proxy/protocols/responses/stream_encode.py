"""Internal events → an OpenAI Responses stream, strict enough for Codex, openai-python and Vercel.

Owns the client side of the Responses stream as a state machine. Every event is `event: <type>` +
`data:` with `sequence_number` counting from 0. `response.created` then `response.in_progress`
open the stream (both with the full response object and the same id); each block becomes one
output item, announced with `output_item.added` — which gives it the next `output_index`, since
clients append items in that order and find them by that index — and always closed with its
`done` events and an `output_item.done` carrying the complete item (Codex acts only on those):

  text       → a content part of a message: content_part.added, output_text.delta…, annotation.added…,
               output_text.done, content_part.done (citations become the part's annotations)
  refusal    → a content part of a message: content_part.added (refusal), refusal.delta…, refusal.done,
               content_part.done
  (text and refusal blocks that follow each other share one message, as in a non-streamed answer)
  reasoning  → reasoning: reasoning_summary_part.added, reasoning_summary_text.delta…, .done, part.done
  tool call  → function_call: function_call_arguments.delta…, function_call_arguments.done
  custom tool→ custom_tool_call: custom_tool_call_input.delta, .done (sent whole: the Chat upstream
               wraps the raw input in JSON, which cannot be unwrapped fragment by fragment)

Blocks an upstream interleaves stay interleaved here — each item's events carry its own
`output_index` and `item_id`, which is how every Responses client keys them — while a sequential
stream gives one item after another, as the real API streams. The stream ends with
`response.completed` (or `response.incomplete` with `incomplete_details.reason`) carrying every
item in `output_index` order and the usage; an answer with no message and no tool call gets one
empty message first (`output_text` of "" with `annotations: []`), since strict clients render the
answer from its message items. A message's `done` events wait for the next event, because only
the finish reason says whether it is `completed` or `incomplete`. A failure closes the open items,
then sends `error` and `response.failed` with `error.code`. Keepalives are a repeated
`response.in_progress`: Codex's idle timer counts events, not comments.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.ir.events import BlockStart, BlockStop, Cite, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.reasoning import signature_to_encrypted
from proxy.ir.request import Citation, OutputPart, ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.responses.annotations import annotation
from proxy.protocols.responses.response import (
    ANSWER_ITEMS,
    ResponseObject,
    call_item,
    custom_input,
    error_event_error,
    message_item,
    new_id,
    reasoning_item,
    status_for,
    text_part,
)
from proxy.protocols.sse import named_frame
from proxy.protocols.transcode import NOTHING_DROPPED


class _Item:
    """An output item being streamed."""

    __slots__ = ("encrypted", "id", "index", "kind", "part", "parts", "text")

    def __init__(self, part: OutputPart, kind: str, item_id: str) -> None:
        self.index = -1  # output_index, given when its output_item.added is sent
        self.part = part
        self.kind = kind  # message | reasoning | function_call | custom_tool_call
        self.id = item_id
        self.text: list[str] = []  # reasoning text, or a call's arguments
        self.encrypted: str | None = None
        self.parts: list[dict[str, Any]] = []  # a message's finished content parts


class _Content:
    """One content part of a message item, fed by one IR text or refusal block."""

    __slots__ = ("citations", "index", "item", "refusal", "text")

    def __init__(self, item: _Item, refusal: bool) -> None:
        self.item = item
        self.index = len(item.parts)  # content_index
        self.refusal = refusal
        self.text: list[str] = []
        self.citations: list[Citation] = []


class ResponsesStreamEncoder:
    def __init__(self, body: dict[str, Any], model: str, custom_tools: set[str], include_encrypted: bool) -> None:
        self.response = ResponseObject(body, model)
        self.done = False
        self.final: dict[str, Any] | None = None  # the response object of response.completed / incomplete
        self.dropped: Mapping[str, int] = NOTHING_DROPPED  # it leaves nothing out
        self._custom_tools = custom_tools
        self._include_encrypted = include_encrypted
        self._seq = 0
        self._created = False
        self._items = 0  # output items added so far: the next output_index
        self._output: dict[int, dict[str, Any]] = {}  # finished items by output_index
        self._open: dict[int, _Item] = {}  # open reasoning and call items by IR block key
        self._contents: dict[int, _Content] = {}  # open message content parts by IR block key
        self._held: _Item | None = None  # a message whose output_item.done awaits its status
        self._usage = Usage()

    # ------------------------------------------------------------ contract

    def encode(self, ev: Event) -> list[bytes]:
        if self.done:
            return []
        if isinstance(ev, Delta):
            return self._delta(ev)
        if isinstance(ev, BlockStart):
            return self._open_item(ev)
        if isinstance(ev, BlockStop):
            if ev.block in self._contents:
                return self._close_content(self._contents.pop(ev.block))
            return self._close_item(self._open.pop(ev.block, None))
        if isinstance(ev, Signature):
            item = self._open.get(ev.block)
            if item is not None and item.kind == "reasoning":
                # An Anthropic signature travels inside encrypted_content (proxy.ir.reasoning).
                item.encrypted = ev.encrypted or signature_to_encrypted(ev.signature, None)
            return []
        if isinstance(ev, Cite):
            content = self._contents.get(ev.block)
            if content is not None and not content.refusal:
                content.citations.append(ev.citation)
            return []
        if isinstance(ev, UsageUpdate):
            self._usage.merge(ev.usage)
            return []
        if isinstance(ev, Start):
            if ev.usage is not None:
                self._usage.merge(ev.usage)
            return self._begin()
        if isinstance(ev, Finish):
            return self._finish(ev.reason)
        if isinstance(ev, Failure):
            return self.fail(ev.error)
        return []

    def keepalive(self) -> list[bytes]:
        if not self._created:
            return self._begin()
        return [self._event("response.in_progress", response=self.response.snapshot("in_progress", []))]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.done:
            return []
        frames = self._begin()
        for content in list(self._contents.values()):
            frames += self._close_content(content, status="incomplete")
        for item in list(self._open.values()):
            frames += self._close_item(item)
        self._contents.clear()
        self._open.clear()
        frames += self._release("completed")
        self.done = True
        frames.append(self._event("error", error=error_event_error(info)))
        usage = self._usage if self._usage.total_tokens else None
        frames.append(self._event("response.failed",
                                  response=self.response.snapshot("failed", self._finished(), usage, error=info)))
        return frames

    # ------------------------------------------------------------ lifecycle

    def _begin(self) -> list[bytes]:
        if self._created:
            return []
        self._created = True
        snapshot = self.response.snapshot("in_progress", [])
        return [self._event("response.created", response=snapshot),
                self._event("response.in_progress", response=snapshot)]

    def _finish(self, reason: str) -> list[bytes]:
        status = status_for(reason)
        frames = [*self._begin(), *self._release(status)]
        if not any(item["type"] in ANSWER_ITEMS for item in self._output.values()):
            frames += self._empty_message(status)
        self.done = True
        self.final = self.response.snapshot(status, self._finished(), self._usage, finish_reason=reason)
        frames.append(self._event(f"response.{status}", response=self.final))
        return frames

    def _finished(self) -> list[dict[str, Any]]:
        return [self._output[i] for i in sorted(self._output)]

    def _empty_message(self, status: str) -> list[bytes]:
        """An answer with no content still gets one (empty) message: strict clients render the
        answer from its message items, and have nothing to show without one."""
        frames = self._open_content(TextPart(""), block=-1)  # -1: a key no IR block uses
        return [*frames, *self._close_content(self._contents.pop(-1)), *self._release(status)]

    # ------------------------------------------------------------ items

    def _open_item(self, ev: BlockStart) -> list[bytes]:
        part = ev.part
        if isinstance(part, TextPart | RefusalPart):
            return self._open_content(part, ev.block)
        frames = self._release("completed")
        if isinstance(part, ToolCallPart):
            custom = part.kind == "custom" or part.name in self._custom_tools
            kind = "custom_tool_call" if custom else "function_call"
            item = self._open[ev.block] = _Item(part, kind, part.item_id or new_id("ctc" if custom else "fc"))
            if custom:
                return frames  # sent whole at its end (see module docstring)
            return [*frames, *self._added(item, call_item(item.id, part, False, "in_progress"))]
        if isinstance(part, ReasoningPart):
            item = self._open[ev.block] = _Item(part, "reasoning", part.id or new_id("rs"))
            item.encrypted = part.encrypted or signature_to_encrypted(None, part.redacted)
            added = reasoning_item(item.id, "", item.encrypted, self._include_encrypted)
            return [*frames, *self._added(item, added),
                    self._event("response.reasoning_summary_part.added", item_id=item.id, output_index=item.index,
                                summary_index=0, part={"type": "summary_text", "text": ""})]
        raise TypeError(f"not an output part: {part!r}")

    def _open_content(self, part: OutputPart, block: int) -> list[bytes]:
        """A text or refusal block: the next content part of the message just finished, when the
        blocks follow each other (as Anthropic splits cited text), else of a new message."""
        frames: list[bytes] = []
        item, self._held = self._held, None
        if item is None:
            item = _Item(part, "message", new_id("msg"))
            frames += self._added(item, message_item(item.id, [], "in_progress"))
        content = self._contents[block] = _Content(item, isinstance(part, RefusalPart))
        empty = {"type": "refusal", "refusal": ""} if content.refusal else text_part("")
        frames.append(self._event("response.content_part.added", item_id=item.id, output_index=item.index,
                                  content_index=content.index, part=empty))
        return frames

    def _delta(self, ev: Delta) -> list[bytes]:
        text = ev.text
        if not text:
            return []
        content = self._contents.get(ev.block)
        if content is not None:
            content.text.append(text)
            owner = content.item
            if content.refusal:
                return [self._event("response.refusal.delta", item_id=owner.id, output_index=owner.index,
                                    content_index=content.index, delta=text)]
            return [self._event("response.output_text.delta", item_id=owner.id, output_index=owner.index,
                                content_index=content.index, delta=text, logprobs=[])]
        item = self._open.get(ev.block)
        if item is None:
            return []
        item.text.append(text)
        kind = item.kind
        if kind == "function_call":
            return [self._event("response.function_call_arguments.delta", item_id=item.id,
                                output_index=item.index, delta=text)]
        if kind == "reasoning":
            return [self._event("response.reasoning_summary_text.delta", item_id=item.id, output_index=item.index,
                                summary_index=0, delta=text)]
        return []  # custom tool input is sent whole when the call ends

    def _close_content(self, content: _Content, status: str = "completed") -> list[bytes]:
        """A content part ends: its done events now; its message's output_item.done waits for the
        next event, since only the finish reason says whether the message is complete."""
        item, text = content.item, "".join(content.text)
        where = {"item_id": item.id, "output_index": item.index, "content_index": content.index}
        frames = self._release("completed") if self._held is not item else []
        if content.refusal:
            part: dict[str, Any] = {"type": "refusal", "refusal": text}
            frames.append(self._event("response.refusal.done", **where, refusal=text))
        else:
            part = text_part(text, [annotation(c, len(text)) for c in content.citations])
            for i, found in enumerate(part["annotations"]):
                frames.append(self._event("response.output_text.annotation.added", **where, annotation_index=i,
                                          annotation=found))
            frames.append(self._event("response.output_text.done", **where, text=text, logprobs=[]))
        frames.append(self._event("response.content_part.done", **where, part=part))
        item.parts.append(part)
        self._held = item
        return frames if status == "completed" else [*frames, *self._release(status)]

    def _close_item(self, item: _Item | None) -> list[bytes]:
        if item is None:
            return []
        text = "".join(item.text)
        where = {"item_id": item.id, "output_index": item.index}
        if item.kind == "reasoning":
            done = reasoning_item(item.id, text, item.encrypted, self._include_encrypted)
            return [self._event("response.reasoning_summary_text.done", **where, summary_index=0, text=text),
                    self._event("response.reasoning_summary_part.done", **where, summary_index=0,
                                part={"type": "summary_text", "text": text}),
                    self._done(item, done)]
        assert isinstance(item.part, ToolCallPart)
        call = ToolCallPart(item.part.id, item.part.name, text, item.part.kind, item.id)
        if item.kind == "custom_tool_call":
            raw = text if item.part.kind == "custom" else custom_input(text)  # native, or the function form
            added = self._added(item, call_item(item.id, call, True, "in_progress"))
            where["output_index"] = item.index
            return [*added,
                    self._event("response.custom_tool_call_input.delta", **where, delta=raw),
                    self._event("response.custom_tool_call_input.done", **where, input=raw),
                    self._done(item, call_item(item.id, call, True, "completed"))]
        return [self._event("response.function_call_arguments.done", **where, name=call.name, arguments=text),
                self._done(item, call_item(item.id, call, False, "completed"))]

    def _release(self, status: str) -> list[bytes]:
        """Send the held message's output_item.done, now that its status is known."""
        item, self._held = self._held, None
        if item is None:
            return []
        return [self._done(item, message_item(item.id, item.parts, status))]

    def _added(self, item: _Item, body: dict[str, Any]) -> list[bytes]:
        """Announce the item, giving it the next output_index: clients append items in the order
        they are added and find them by that index."""
        item.index = self._items
        self._items += 1
        return [self._event("response.output_item.added", output_index=item.index, item=body)]

    def _done(self, item: _Item, body: dict[str, Any]) -> bytes:
        self._output[item.index] = body
        return self._event("response.output_item.done", output_index=item.index, item=body)

    def _event(self, kind: str, **fields: Any) -> bytes:
        frame = named_frame(kind, {"type": kind, "sequence_number": self._seq, **fields})
        self._seq += 1
        return frame
