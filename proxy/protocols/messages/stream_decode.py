"""Anthropic Messages stream → internal events.

Owns reading an Anthropic upstream's events: `message_start` → Start with the prompt usage, text /
thinking / redacted_thinking / tool_use blocks → blocks, `signature_delta` → Signature,
`citations_delta` (and a text block's starting `citations`) → Cite, `message_delta` → usage and
the stop reason, `message_stop` → Finish, `event: error` → Failure. Blocks the IR has no place for
(server-tool blocks such as `web_search_tool_result`) are skipped with their deltas. `ping` and
unknown events are ignored.

The real API streams one block at a time, but gateways and compatible servers may open several and
alternate their deltas, so every block is assembled by its `index` (which is also its IR key) with
several open at once. Assembly is strict: a second start for an index, a delta or stop for an
index never opened or already stopped, or a known delta type in the wrong kind of block (text into
a tool_use) is a stream error reported in-band — never guessed at, never merged into another block.
Blocks still open at `message_delta` / `message_stop` end there (some servers forget to stop them).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from proxy.ir import response as ir
from proxy.ir.events import (
    BlockStart,
    BlockStop,
    Cite,
    Delta,
    Event,
    Failure,
    Finish,
    Signature,
    Start,
    UsageUpdate,
)
from proxy.ir.json_tool import TextFromCall
from proxy.ir.request import ReasoningPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo
from proxy.protocols.fields import obj
from proxy.protocols.messages.citations import citation_from_anthropic
from proxy.protocols.messages.vocabulary import FINISH_FROM_STOP_REASON, error_from_anthropic, usage_from_anthropic
from proxy.protocols.sse import SSEEvent
from proxy.protocols.transcode import closed_early, parse_payload

log = logging.getLogger(__name__)

# Delta types and the block kind each belongs in; any other known type in a block is an error.
DELTA_KIND = {"text_delta": "text", "citations_delta": "text", "thinking_delta": "thinking",
              "signature_delta": "thinking", "input_json_delta": "tool_use"}


class _Block:
    """One open content block, by its `index`."""

    __slots__ = ("initial", "kind", "tool_had_delta")

    def __init__(self, kind: str, initial: Any = None) -> None:
        self.kind = kind  # text | thinking | redacted | tool_use | skip
        self.tool_had_delta = False
        self.initial = initial  # a tool_use's input as its start event gave it


class MessagesStreamDecoder:
    def __init__(self, relayed: bool = False) -> None:
        """`relayed`: this decoder watches a passthrough stream, whose every block goes to the client
        as it came — so a block with no IR place is relayed, not skipped, and is not logged as skipped."""
        self._relayed = relayed
        self._started = False
        self._done = False
        self._open: dict[int, _Block] = {}  # open blocks by the upstream's index (= the IR block key)
        self._closed: set[int] = set()
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        # The forced JSON tool's call is the answer's text (proxy.ir.json_tool) — for a translated
        # stream; a passthrough relays the upstream's blocks as they are.
        self._json_answer = None if relayed else TextFromCall()

    def feed(self, sse: SSEEvent) -> list[Event]:
        if self._done or not sse.data.strip():
            return []
        payload = parse_payload(sse.data.decode("utf-8", "replace"), "event")  # a broken character: U+FFFD
        if isinstance(payload, ErrorInfo):
            return self._fail(payload.message)
        kind = payload.get("type") if isinstance(payload.get("type"), str) else sse.event
        handler = _HANDLERS.get(kind or "")
        if handler is None:
            return []  # ping, and event types added after this was written
        if not self._started and kind not in ("message_start", "error"):
            return self._fail(f"upstream sent {kind} before message_start")
        events = handler(self, payload)
        return events if self._json_answer is None else [out for ev in events for out in self._json_answer.feed(ev)]

    def close(self) -> list[Event]:
        if self._done:
            return []
        return self._fail(closed_early(self._started).message)

    # ------------------------------------------------------------ events

    def _message_start(self, payload: dict[str, Any]) -> list[Event]:
        if self._started:
            return []
        message = obj(payload, "message")
        self._started = True
        return [Start(id=str(message.get("id") or ""), model=str(message.get("model") or ""),
                      created=int(time.time()), usage=usage_from_anthropic(message.get("usage")))]

    def _block_start(self, payload: dict[str, Any]) -> list[Event]:
        index = _index(payload)
        if index is None:
            return self._fail("upstream sent content_block_start without a valid index")
        if index in self._open or index in self._closed:
            return self._fail(f"upstream opened content block {index} a second time")
        block = obj(payload, "content_block")
        btype = block.get("type")
        out: list[Event] = []
        if btype == "text":
            self._open[index] = _Block("text")
            out.append(BlockStart(TextPart(""), index))
            if isinstance(block.get("text"), str) and block["text"]:
                out.append(Delta(block["text"], index))
            citations = block.get("citations")
            for raw in citations if isinstance(citations, list) else ():
                citation = citation_from_anthropic(raw)
                if citation is not None:
                    out.append(Cite(citation, index))
        elif btype == "thinking":
            self._open[index] = _Block("thinking")
            out.append(BlockStart(ReasoningPart(), index))
            if isinstance(block.get("thinking"), str) and block["thinking"]:
                out.append(Delta(block["thinking"], index))
        elif btype == "redacted_thinking":
            self._open[index] = _Block("redacted")
            out.append(BlockStart(ReasoningPart(redacted=str(block.get("data") or "")), index))
        elif btype == "tool_use":
            self._open[index] = _Block("tool_use", block.get("input"))
            # Custom tools travel as a function taking {"input": …}; client encoders unwrap them by name.
            out.append(BlockStart(ToolCallPart(id=str(block.get("id") or ""), name=str(block.get("name") or "")),
                                  index))
        else:
            self._open[index] = _Block("skip")
            if not self._relayed:
                log.info("skipping an upstream %s block: clients of other protocols have no place for it", btype)
        return out

    def _block_delta(self, payload: dict[str, Any]) -> list[Event]:
        index = _index(payload)
        block = self._open.get(index) if index is not None else None
        if index is None or block is None:
            state = "after it closed" if index in self._closed else "that was never opened"
            return self._fail(f"upstream sent a delta for content block {payload.get('index')!r} {state}")
        delta = obj(payload, "delta")
        dtype = delta.get("type")
        belongs = DELTA_KIND.get(dtype) if isinstance(dtype, str) else None
        if belongs is None or block.kind == "skip":
            return []  # delta types added after this was written; anything inside a skipped block
        if belongs != block.kind:
            return self._fail(f"upstream sent a {dtype} into content block {index}, a {block.kind} block")
        if dtype == "text_delta" or dtype == "thinking_delta":
            text = delta.get("text" if dtype == "text_delta" else "thinking")
            return [Delta(text, index)] if isinstance(text, str) and text else []
        if dtype == "signature_delta":
            signature = delta.get("signature")
            return [Signature(signature=signature, block=index)] if isinstance(signature, str) else []
        if dtype == "citations_delta":
            citation = citation_from_anthropic(delta.get("citation"))
            return [Cite(citation, index)] if citation is not None else []
        fragment = delta.get("partial_json")
        if not isinstance(fragment, str) or not fragment:
            return []
        block.tool_had_delta = True
        return [Delta(fragment, index)]

    def _block_stop(self, payload: dict[str, Any]) -> list[Event]:
        index = _index(payload)
        if index is None or index not in self._open:
            state = "after it closed" if index in self._closed else "that was never opened"
            return self._fail(f"upstream sent content_block_stop for content block {payload.get('index')!r} {state}")
        return self._close(index)

    def _message_delta(self, payload: dict[str, Any]) -> list[Event]:
        out = self._close_all()  # blocks an upstream forgot to stop end with the message
        delta = obj(payload, "delta")
        if isinstance(delta.get("stop_reason"), str):
            self._stop_reason = delta["stop_reason"]
        if isinstance(delta.get("stop_sequence"), str):
            self._stop_sequence = delta["stop_sequence"]
        usage = usage_from_anthropic(payload.get("usage"))
        if usage is not None:
            out.append(UsageUpdate(usage))
        return out

    def _message_stop(self, payload: dict[str, Any]) -> list[Event]:
        out = self._close_all()
        self._done = True
        reason = FINISH_FROM_STOP_REASON.get(self._stop_reason or "end_turn", ir.STOP)
        out.append(Finish(reason, self._stop_sequence if reason == ir.STOP_SEQUENCE else None))
        return out

    def _error(self, payload: dict[str, Any]) -> list[Event]:
        out = self._close_all() if self._started else []
        self._done = True
        out.append(Failure(error_from_anthropic(payload.get("error"))))
        return out

    # ------------------------------------------------------------ helpers

    def _close(self, index: int) -> list[Event]:
        block = self._open.pop(index)
        self._closed.add(index)
        if block.kind == "skip":
            return []
        out: list[Event] = []
        if block.kind == "tool_use" and not block.tool_had_delta:
            # A tool_use whose input came whole in its start event, with no input_json_delta.
            initial = block.initial if isinstance(block.initial, dict) else {}
            out.append(Delta(json.dumps(initial, ensure_ascii=False), index))
        out.append(BlockStop(index))
        return out

    def _close_all(self) -> list[Event]:
        return [ev for index in sorted(self._open) for ev in self._close(index)]

    def _fail(self, message: str) -> list[Event]:
        out = self._close_all() if self._started else []
        self._done = True
        out.append(Failure(ErrorInfo(kind="upstream_error", message=message, status=502)))
        return out


def _index(payload: dict[str, Any]) -> int | None:
    """The event's content block index, or None when it has no valid one."""
    value = payload.get("index")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


_HANDLERS = {
    "message_start": MessagesStreamDecoder._message_start,
    "content_block_start": MessagesStreamDecoder._block_start,
    "content_block_delta": MessagesStreamDecoder._block_delta,
    "content_block_stop": MessagesStreamDecoder._block_stop,
    "message_delta": MessagesStreamDecoder._message_delta,
    "message_stop": MessagesStreamDecoder._message_stop,
    "error": MessagesStreamDecoder._error,
}
