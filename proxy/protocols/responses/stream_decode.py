"""OpenAI Responses stream → internal events.

Owns reading a `protocol: responses` upstream's events: `response.created` → Start; a `message`
item's output_text and refusal content parts → text and refusal blocks (`annotation.added` → Cite);
a `reasoning` item → one reasoning block (summary parts and raw reasoning text joined by a blank
line) whose `encrypted_content`, taken from `output_item.done` because the one in
`output_item.added` may be incomplete, becomes a Signature; `function_call` and `custom_tool_call`
items → tool-call blocks; `response.completed` / `response.incomplete` → usage and Finish; `error` /
`response.failed` → Failure. Item types the IR has no place for (web_search_call, …) are skipped
with their events, and keepalives and unknown event types are ignored.

The real API streams one item at a time, but gateways and compatible servers may open several and
alternate their events, so every item is assembled by its `item_id` (`output_index` locates an
item only when an event names no id; `sequence_number` orders events, it identifies nothing), with
several open at once, and each content part of a message is a block of its own. Assembly is
strict: an item announced twice, a delta naming an item that was never announced or is already
done, or a delta of the wrong kind for its item (arguments into a message) is a stream error
reported in-band — never guessed at, never merged into another block. An event that names no item
at all goes to the one item of its kind that is open (lenient servers leave ids out).

Text that only arrives whole — in a `.done` event or the final item, as some compatible servers
send it — is delivered then, once: each piece of an item is remembered when its text is emitted.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from proxy.ir.events import BlockStart, BlockStop, Cite, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.request import ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo
from proxy.protocols.fields import count, items, obj, text
from proxy.protocols.responses.annotations import citation_from_responses
from proxy.protocols.responses.vocabulary import (
    CALL_ITEMS,
    call_arguments,
    call_id,
    error_from_responses,
    finish_from_responses,
    has_calls,
    usage_from_responses,
)
from proxy.protocols.sse import SSEEvent
from proxy.protocols.transcode import closed_early, parse_payload

log = logging.getLogger(__name__)

Piece = tuple[str, int]  # one piece of an item: ("text" | "refusal", content_index), ("summary", i), …
_KNOWN_ITEMS = ("message", "reasoning", *CALL_ITEMS)


class _Item:
    """One output item being streamed."""

    __slots__ = ("block", "emitted", "id", "index", "last", "parts", "type")

    def __init__(self, itype: str, item_id: str, index: int | None) -> None:
        self.type = itype if itype in _KNOWN_ITEMS else "skip"
        self.id = item_id
        self.index = index  # output_index, when the upstream gave one
        self.block: int | None = None  # the open block of a reasoning or call item
        self.parts: dict[int, int] = {}  # a message's open content parts: content_index → block key
        self.emitted: set[Piece] = set()  # pieces whose text has been delivered
        self.last: Piece | None = None  # the piece reasoning text last came from, to separate the next


class ResponsesStreamDecoder:
    def __init__(self, relayed: bool = False) -> None:
        """`relayed`: this decoder watches a passthrough stream, whose every item goes to the client as
        it came — so an item with no IR place is relayed, not skipped, and is not logged as skipped."""
        self._relayed = relayed
        self._started = False
        self._done = False
        self._items: list[_Item] = []  # open items, in the order they were announced
        self._finished_ids: set[str] = set()
        self._finished_indices: set[int] = set()
        self._next_block = 0
        self._saw_calls = False
        # For the passthrough, which adds events of its own only when the upstream breaks off:
        self.last_sequence: int | None = None  # the upstream's last `sequence_number`
        self.response: dict[str, Any] | None = None  # the last response object it announced

    # ------------------------------------------------------------ public

    def feed(self, sse: SSEEvent) -> list[Event]:
        if self._done:
            return []
        data = sse.data.strip()
        if not data or data == b"[DONE]":  # a few compatible servers end with Chat's terminator
            return []
        payload = parse_payload(data.decode("utf-8", "replace"), "event")  # a broken character: U+FFFD
        if isinstance(payload, ErrorInfo):
            return self._fail([], payload.message)
        if isinstance(payload.get("sequence_number"), int):
            self.last_sequence = payload["sequence_number"]
        if isinstance(payload.get("response"), dict):
            self.response = payload["response"]
        kind = payload.get("type") if isinstance(payload.get("type"), str) else sse.event
        if kind not in _HANDLERS and payload.get("error"):
            kind = "error"  # an error object with no (or an unknown) type, as some compatible servers send
        handler = _HANDLERS.get(kind or "")
        if handler is None:
            return []  # keepalives, hosted-tool progress, and event types added after this was written
        out: list[Event] = []
        if kind not in ("error", "response.failed"):
            self._start(obj(payload, "response"), out)
        handler(self, payload, out)
        return out

    def close(self) -> list[Event]:
        """The upstream stream ended: without a terminal event, it broke off."""
        if self._done:
            return []
        return self._fail([], closed_early(self._started).message)

    # ------------------------------------------------------------ lifecycle

    def _start(self, response: dict[str, Any], out: list[Event]) -> None:
        # Normally response.created; any other event first still starts the answer rather than lose it.
        if self._started:
            return
        self._started = True
        out.append(Start(id=text(response, "id") or "resp_" + uuid.uuid4().hex, model=text(response, "model"),
                         created=count(response.get("created_at")) or int(time.time())))

    def _on_lifecycle(self, payload: dict[str, Any], out: list[Event]) -> None:
        pass  # created / in_progress / queued: the Start, if any, was made in feed

    def _on_completed(self, payload: dict[str, Any], out: list[Event]) -> None:
        self._finish(payload, out, incomplete=False)

    def _on_incomplete(self, payload: dict[str, Any], out: list[Event]) -> None:
        self._finish(payload, out, incomplete=True)

    def _finish(self, payload: dict[str, Any], out: list[Event], incomplete: bool) -> None:
        """response.completed / response.incomplete: usage, then the finish reason."""
        response = obj(payload, "response")
        for item in list(self._items):  # items an upstream never said were done end with the response
            self._end(item, out)
        usage = usage_from_responses(response.get("usage"))
        if usage is not None:
            out.append(UsageUpdate(usage))
        self._done = True
        saw_calls = self._saw_calls or has_calls(response.get("output"))
        out.append(Finish(finish_from_responses(response, saw_calls, incomplete)))

    def _on_failed(self, payload: dict[str, Any], out: list[Event]) -> None:
        self._done = True
        out.append(Failure(error_from_responses(obj(payload, "response").get("error"))))

    def _on_error(self, payload: dict[str, Any], out: list[Event]) -> None:
        # The real API nests the error ({"error": {type, code, message}}); the SDK type is flat.
        error = payload.get("error")
        if isinstance(error, str):
            error = {"message": error}
        elif not isinstance(error, dict):
            error = payload
        self._done = True
        out.append(Failure(error_from_responses(error, "upstream reported an error in its stream")))

    # ------------------------------------------------------------ items

    def _on_item_added(self, payload: dict[str, Any], out: list[Event]) -> None:
        item = obj(payload, "item")
        self._announce(item, payload.get("output_index"), out)

    def _announce(self, item: dict[str, Any], index: Any, out: list[Event]) -> _Item | None:
        itype, item_id = text(item, "type"), text(item, "id")
        position = index if isinstance(index, int) and not isinstance(index, bool) else None
        if (item_id and (item_id in self._finished_ids or any(i.id == item_id for i in self._items))) or (
                position is not None and any(i.index == position for i in self._items)):
            self._fail(out, f"upstream announced output item {item_id or position!r} a second time")
            return None
        current = _Item(itype, item_id, position)
        self._items.append(current)
        if itype == "reasoning":
            self._open_block(current, ReasoningPart(id=item_id or None), out)
        elif itype in CALL_ITEMS:
            self._saw_calls = True
            call = ToolCallPart(call_id(item), text(item, "name"), item_id=item_id or None)
            if itype == "custom_tool_call":
                call.kind = "custom"
            self._open_block(current, call, out)
        elif itype != "message" and not self._relayed:
            log.info("skipping an upstream %s item: clients of other protocols have no place for it", itype)
        return current

    def _on_item_done(self, payload: dict[str, Any], out: list[Event]) -> None:
        item = obj(payload, "item")
        current = self._find(text(item, "id"), payload.get("output_index"))
        if current is None:
            if self._is_finished(text(item, "id"), payload.get("output_index")):
                self._fail(out, f"upstream finished output item {text(item, 'id')!r} a second time")
                return
            current = self._announce(item, payload.get("output_index"), out)  # sent whole, never announced
            if current is None:
                return
        if current.type == "message":
            for i, part in enumerate(items(item, "content")):
                if isinstance(part, dict):
                    self._content_done(current, i, part, out)
                    if i in current.parts:  # the item is done, so each part is whole: one after another
                        out.append(BlockStop(current.parts.pop(i)))
        elif current.type == "reasoning":
            for kind, key in (("summary", "summary"), ("text", "content")):
                for i, part in enumerate(items(item, key)):
                    if isinstance(part, dict):
                        self._fill(current, (kind, i), text(part, "text"), out)
            encrypted = item.get("encrypted_content")
            if isinstance(encrypted, str) and encrypted and current.block is not None:
                out.append(Signature(encrypted=encrypted, block=current.block))
        elif current.type == "function_call":
            self._fill(current, ("arguments", 0), call_arguments(item), out)
        elif current.type == "custom_tool_call":
            self._fill(current, ("input", 0), text(item, "input"), out)
        self._end(current, out)

    # ------------------------------------------------------------ message content

    def _on_part_added(self, payload: dict[str, Any], out: list[Event]) -> None:
        kind = {"output_text": "text", "refusal": "refusal"}.get(text(obj(payload, "part"), "type"))
        current = self._target(payload, "message", out)
        if kind is not None and current is not None:
            self._part_block(current, count(payload.get("content_index")), kind, out)

    def _on_part_done(self, payload: dict[str, Any], out: list[Event]) -> None:
        current = self._target(payload, "message", out)
        if current is not None:
            index = count(payload.get("content_index"))
            self._content_done(current, index, obj(payload, "part"), out)
            block = current.parts.pop(index, None)
            if block is not None:
                out.append(BlockStop(block))

    def _content_done(self, current: _Item, index: int, part: dict[str, Any], out: list[Event]) -> None:
        ptype = text(part, "type")
        if ptype == "output_text":
            self._fill(current, ("text", index), text(part, "text"), out)
        elif ptype == "refusal":
            self._fill(current, ("refusal", index), text(part, "refusal"), out)

    def _on_text(self, kind: str, field_name: str, payload: dict[str, Any], out: list[Event]) -> None:
        current = self._target(payload, "message", out, lenient=True)
        if current is not None:
            piece = (kind, count(payload.get("content_index")))
            self._deliver(current, piece, text(payload, field_name), field_name == "delta", out)

    def _on_annotation(self, payload: dict[str, Any], out: list[Event]) -> None:
        current = self._target(payload, "message", out)
        citation = citation_from_responses(payload.get("annotation"))
        if current is not None and citation is not None:
            block = self._part_block(current, count(payload.get("content_index")), "text", out)
            out.append(Cite(citation, block))

    # ------------------------------------------------------------ reasoning and calls

    def _on_piece(self, itype: str, kind: str, index_name: str | None, field_name: str,
                  payload: dict[str, Any], out: list[Event]) -> None:
        current = self._target(payload, itype, out)
        if current is not None:
            piece = (kind, count(payload.get(index_name)) if index_name else 0)
            self._deliver(current, piece, text(payload, field_name), field_name == "delta", out)

    # ------------------------------------------------------------ finding the item an event names

    def _find(self, item_id: str, index: Any) -> _Item | None:
        if item_id:
            return next((i for i in self._items if i.id == item_id), None)
        if isinstance(index, int) and not isinstance(index, bool):
            return next((i for i in self._items if i.index == index), None)
        return None

    def _is_finished(self, item_id: str, index: Any) -> bool:
        if item_id:
            return item_id in self._finished_ids
        return isinstance(index, int) and index in self._finished_indices

    def _target(self, payload: dict[str, Any], itype: str, out: list[Event], lenient: bool = False) -> _Item | None:
        """The open item an event is for, or None after reporting why it has none (a skipped
        item's events are dropped quietly). With no id and no index, the one open item of `itype`;
        text naming no item and finding none opens a message (`lenient`, for servers that send
        bare text events)."""
        item_id, index = text(payload, "item_id"), payload.get("output_index")
        named = bool(item_id) or (isinstance(index, int) and not isinstance(index, bool))
        current = self._find(item_id, index) if named else None
        if current is None and not named:
            candidates = [i for i in self._items if i.type == itype]
            if len(candidates) == 1:
                current = candidates[0]
            elif not candidates and lenient and itype == "message":
                current = _Item("message", "", None)
                self._items.append(current)
        if current is None:
            state = "after it was done" if named and self._is_finished(item_id, index) else "that was never announced"
            self._fail(out, f"upstream sent {payload.get('type')} for output item {item_id or index!r} {state}")
            return None
        if current.type == "skip":
            return None
        if current.type != itype:
            self._fail(out, f"upstream sent {payload.get('type')} for output item {current.id or current.index!r}, "
                            f"a {current.type} item")
            return None
        return current

    # ------------------------------------------------------------ delivery

    def _deliver(self, current: _Item, piece: Piece, delta: str, is_delta: bool, out: list[Event]) -> None:
        """Deliver text of one piece of an item: a delta always; a `.done` text only if no delta did."""
        if not delta or (not is_delta and piece in current.emitted):
            return
        if current.type == "message":
            block = self._part_block(current, piece[1], piece[0], out)
        elif current.block is None:
            return  # the item's block is already closed
        else:
            block = current.block
            if current.type == "reasoning" and current.last is not None and current.last != piece:
                out.append(Delta("\n\n", block))  # summary parts are paragraphs; keep them apart as the API shows them
        out.append(Delta(delta, block))
        current.emitted.add(piece)
        current.last = piece

    def _fill(self, current: _Item, piece: Piece, whole: str, out: list[Event]) -> None:
        self._deliver(current, piece, whole, False, out)

    def _part_block(self, current: _Item, index: int, kind: str, out: list[Event]) -> int:
        block = current.parts.get(index)
        if block is None:
            block = current.parts[index] = self._new_block()
            out.append(BlockStart(TextPart("") if kind == "text" else RefusalPart(""), block))
        return block

    def _open_block(self, current: _Item, part: ReasoningPart | ToolCallPart, out: list[Event]) -> None:
        current.block = self._new_block()
        out.append(BlockStart(part, current.block))

    def _new_block(self) -> int:
        self._next_block += 1
        return self._next_block - 1

    def _end(self, current: _Item, out: list[Event]) -> None:
        """The item is done: stop its blocks and forget it."""
        for block in current.parts.values():
            out.append(BlockStop(block))
        if current.block is not None:
            out.append(BlockStop(current.block))
        current.parts, current.block = {}, None
        self._items.remove(current)
        if current.id:
            self._finished_ids.add(current.id)
        if current.index is not None:
            self._finished_indices.add(current.index)

    def _fail(self, out: list[Event], message: str) -> list[Event]:
        if self._done:
            return out
        self._done = True
        out.append(Failure(ErrorInfo(kind="upstream_error", message=message, status=502)))
        return out


def _text(kind: str, field_name: str) -> Callable[..., None]:
    return lambda self, payload, out: self._on_text(kind, field_name, payload, out)


def _piece(itype: str, kind: str, index_name: str | None, field_name: str) -> Callable[..., None]:
    return lambda self, payload, out: self._on_piece(itype, kind, index_name, field_name, payload, out)


_HANDLERS: dict[str, Callable[..., None]] = {
    "response.created": ResponsesStreamDecoder._on_lifecycle,
    "response.in_progress": ResponsesStreamDecoder._on_lifecycle,
    "response.queued": ResponsesStreamDecoder._on_lifecycle,
    "response.output_item.added": ResponsesStreamDecoder._on_item_added,
    "response.output_item.done": ResponsesStreamDecoder._on_item_done,
    "response.content_part.added": ResponsesStreamDecoder._on_part_added,
    "response.content_part.done": ResponsesStreamDecoder._on_part_done,
    "response.output_text.delta": _text("text", "delta"),
    "response.output_text.done": _text("text", "text"),
    "response.output_text.annotation.added": ResponsesStreamDecoder._on_annotation,
    "response.refusal.delta": _text("refusal", "delta"),
    "response.refusal.done": _text("refusal", "refusal"),
    "response.reasoning_summary_text.delta": _piece("reasoning", "summary", "summary_index", "delta"),
    "response.reasoning_summary_text.done": _piece("reasoning", "summary", "summary_index", "text"),
    "response.reasoning_text.delta": _piece("reasoning", "text", "content_index", "delta"),
    "response.reasoning_text.done": _piece("reasoning", "text", "content_index", "text"),
    "response.function_call_arguments.delta": _piece("function_call", "arguments", None, "delta"),
    "response.function_call_arguments.done": _piece("function_call", "arguments", None, "arguments"),
    "response.custom_tool_call_input.delta": _piece("custom_tool_call", "input", None, "delta"),
    "response.custom_tool_call_input.done": _piece("custom_tool_call", "input", None, "input"),
    "response.completed": ResponsesStreamDecoder._on_completed,
    "response.incomplete": ResponsesStreamDecoder._on_incomplete,
    "response.failed": ResponsesStreamDecoder._on_failed,
    "error": ResponsesStreamDecoder._on_error,
}
