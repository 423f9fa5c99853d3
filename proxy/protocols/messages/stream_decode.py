"""Anthropic Messages stream → internal events; and the usage and stop-reason vocabulary both
the stream and the whole-Message decoder share.

Owns reading an Anthropic upstream's events (PROTOCOLS.md §2.3). Messages is already sequential
(one block open at a time), so this is mostly a renaming: `message_start` → Start with the prompt
usage, text / thinking / redacted_thinking / tool_use blocks → blocks, `signature_delta` →
Signature, `message_delta` → usage and the stop reason, `message_stop` → Finish, `event: error` →
Failure. Blocks the IR has no place for (server-tool blocks such as `web_search_tool_result`) are
skipped with their deltas. `ping` and unknown events are ignored.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from proxy.errors import KIND_FOR_ERROR_TYPE, KIND_STATUS
from proxy.ir import response as ir
from proxy.ir.events import BlockStart, BlockStop, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.request import ReasoningPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo, Usage
from proxy.sse import SSEEvent, loads

log = logging.getLogger(__name__)

FINISH_FROM_STOP_REASON = {
    "end_turn": ir.STOP, "max_tokens": ir.LENGTH, "stop_sequence": ir.STOP_SEQUENCE, "tool_use": ir.TOOL_CALLS,
    "pause_turn": ir.PAUSE, "refusal": ir.CONTENT_FILTER, "model_context_window_exceeded": ir.CONTEXT_WINDOW,
}


def usage_from_anthropic(raw: Any) -> Usage | None:
    """Anthropic usage → IR usage (whose input counts cached tokens too, the OpenAI convention)."""
    if not isinstance(raw, dict):
        return None

    def number(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    cache_read, cache_write = number("cache_read_input_tokens"), number("cache_creation_input_tokens")
    details = raw.get("output_tokens_details")
    thinking = details.get("thinking_tokens") if isinstance(details, dict) else None
    return Usage(input_tokens=number("input_tokens") + cache_read + cache_write, output_tokens=number("output_tokens"),
                 cache_read_tokens=cache_read, cache_write_tokens=cache_write,
                 reasoning_tokens=thinking if isinstance(thinking, int) else 0)


def error_from_anthropic(error: Any, default_message: str = "upstream error") -> ErrorInfo:
    """The `error` object of an Anthropic error body or `event: error`."""
    error = error if isinstance(error, dict) else {}
    utype = error.get("type") if isinstance(error.get("type"), str) else None
    kind = KIND_FOR_ERROR_TYPE.get(utype or "", "api_error")
    message = error.get("message") if isinstance(error.get("message"), str) and error.get("message") else None
    return ErrorInfo(kind=kind, message=message or default_message, status=KIND_STATUS.get(kind, 500),
                     upstream_type=utype)


class MessagesStreamDecoder:
    def __init__(self) -> None:
        self._started = False
        self._done = False
        self._open: str | None = None  # kind of the open block: text | thinking | redacted | tool_use | skip
        self._tool_had_delta = False
        self._tool_initial: Any = None
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None

    def feed(self, sse: SSEEvent) -> list[Event]:
        if self._done or not sse.data.strip():
            return []
        try:
            payload = loads(sse.data)
        except ValueError:
            return self._fail("upstream sent a malformed JSON event in its stream")
        if not isinstance(payload, dict):
            return self._fail("upstream sent a stream event that is not a JSON object")
        kind = payload.get("type") if isinstance(payload.get("type"), str) else sse.event
        handler = _HANDLERS.get(kind or "")
        if handler is None:
            return []  # ping, and event types added after this was written
        if not self._started and kind not in ("message_start", "error"):
            return self._fail(f"upstream sent {kind} before message_start")
        return handler(self, payload)

    def close(self) -> list[Event]:
        if self._done:
            return []
        if not self._started:
            return self._fail("upstream closed the stream without sending any event")
        return self._fail("upstream closed the stream before it finished")

    # ------------------------------------------------------------ events

    def _message_start(self, payload: dict[str, Any]) -> list[Event]:
        if self._started:
            return []
        message = _obj(payload, "message")
        self._started = True
        return [Start(id=str(message.get("id") or ""), model=str(message.get("model") or ""),
                      created=int(time.time()), usage=usage_from_anthropic(message.get("usage")))]

    def _block_start(self, payload: dict[str, Any]) -> list[Event]:
        out = self._close_open()
        block = _obj(payload, "content_block")
        btype = block.get("type")
        if btype == "text":
            self._open = "text"
            out.append(BlockStart(TextPart("")))
            if isinstance(block.get("text"), str) and block["text"]:
                out.append(Delta(block["text"]))
        elif btype == "thinking":
            self._open = "thinking"
            out.append(BlockStart(ReasoningPart()))
            if isinstance(block.get("thinking"), str) and block["thinking"]:
                out.append(Delta(block["thinking"]))
        elif btype == "redacted_thinking":
            self._open = "redacted"
            out.append(BlockStart(ReasoningPart(redacted=str(block.get("data") or ""))))
        elif btype == "tool_use":
            self._open = "tool_use"
            # Custom tools travel as a function taking {"input": …}; client encoders unwrap them by name.
            out.append(BlockStart(ToolCallPart(id=str(block.get("id") or ""), name=str(block.get("name") or ""))))
            self._tool_had_delta = False
            self._tool_initial = block.get("input")
        else:
            self._open = "skip"
            log.info("skipping an upstream %s block: clients of other protocols have no place for it", btype)
        return out

    def _block_delta(self, payload: dict[str, Any]) -> list[Event]:
        delta = _obj(payload, "delta")
        dtype = delta.get("type")
        if self._open == "text" and dtype == "text_delta":
            return _text_delta(delta.get("text"))
        if self._open == "thinking" and dtype == "thinking_delta":
            return _text_delta(delta.get("thinking"))
        if self._open == "thinking" and dtype == "signature_delta" and isinstance(delta.get("signature"), str):
            return [Signature(signature=delta["signature"])]
        if self._open == "tool_use" and dtype == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            fragment = delta["partial_json"]
            if not fragment:
                return []
            self._tool_had_delta = True
            return [Delta(fragment)]
        return []  # citations and deltas that do not match their block (the SDKs ignore those too)

    def _block_stop(self, payload: dict[str, Any]) -> list[Event]:
        return self._close_open()

    def _message_delta(self, payload: dict[str, Any]) -> list[Event]:
        out = self._close_open()
        delta = _obj(payload, "delta")
        if isinstance(delta.get("stop_reason"), str):
            self._stop_reason = delta["stop_reason"]
        if isinstance(delta.get("stop_sequence"), str):
            self._stop_sequence = delta["stop_sequence"]
        usage = usage_from_anthropic(payload.get("usage"))
        if usage is not None:
            out.append(UsageUpdate(usage))
        return out

    def _message_stop(self, payload: dict[str, Any]) -> list[Event]:
        out = self._close_open()
        self._done = True
        reason = FINISH_FROM_STOP_REASON.get(self._stop_reason or "end_turn", ir.STOP)
        out.append(Finish(reason, self._stop_sequence if reason == ir.STOP_SEQUENCE else None))
        return out

    def _error(self, payload: dict[str, Any]) -> list[Event]:
        out = self._close_open() if self._started else []
        self._done = True
        out.append(Failure(error_from_anthropic(payload.get("error"))))
        return out

    # ------------------------------------------------------------ helpers

    def _close_open(self) -> list[Event]:
        kind, self._open = self._open, None
        if kind is None or kind == "skip":
            return []
        out: list[Event] = []
        if kind == "tool_use" and not self._tool_had_delta:
            # A tool_use whose input came whole in its start event, with no input_json_delta.
            initial = self._tool_initial if isinstance(self._tool_initial, dict) else {}
            out.append(Delta(json.dumps(initial, ensure_ascii=False)))
        out.append(BlockStop())
        return out

    def _fail(self, message: str) -> list[Event]:
        out = self._close_open() if self._started else []
        self._done = True
        out.append(Failure(ErrorInfo(kind="upstream_error", message=message, status=502)))
        return out


def _obj(payload: dict[str, Any], key: str) -> dict[str, Any]:
    value = payload.get(key)
    return value if isinstance(value, dict) else {}


def _text_delta(text: Any) -> list[Event]:
    return [Delta(text)] if isinstance(text, str) and text else []


_HANDLERS = {
    "message_start": MessagesStreamDecoder._message_start,
    "content_block_start": MessagesStreamDecoder._block_start,
    "content_block_delta": MessagesStreamDecoder._block_delta,
    "content_block_stop": MessagesStreamDecoder._block_stop,
    "message_delta": MessagesStreamDecoder._message_delta,
    "message_stop": MessagesStreamDecoder._message_stop,
    "error": MessagesStreamDecoder._error,
}
