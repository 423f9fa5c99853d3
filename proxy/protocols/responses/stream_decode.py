"""OpenAI Responses stream → internal events; and the usage, finish-reason and error vocabulary
both the stream and the whole-response decoder share.

Owns reading a `protocol: responses` upstream's events (PROTOCOLS.md §3.3). The real API already
streams one output item at a time, so this is mostly a renaming: `response.created` → Start;
a `message` item's output_text and refusal content parts → text and refusal blocks; a `reasoning`
item → one reasoning block (summary parts and raw reasoning text joined by a blank line) whose
`encrypted_content`, taken from `output_item.done` because the one in `output_item.added` may be
incomplete, becomes a Signature; `function_call` and `custom_tool_call` items → tool-call blocks;
`response.completed` / `response.incomplete` → usage and Finish; `error` / `response.failed` →
Failure. Item types the IR has no place for (web_search_call, …) are skipped with their events,
and keepalives and unknown event types are ignored.

Text that only arrives whole — in a `.done` event or the final item, as some compatible servers
send it — is delivered then, once: each piece of an item is remembered when its text is emitted.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from proxy.errors import KIND_FOR_ERROR_TYPE, KIND_STATUS, scrub
from proxy.ir import response as ir
from proxy.ir.events import BlockStart, BlockStop, Delta, Event, Failure, Finish, Signature, Start, UsageUpdate
from proxy.ir.request import OutputPart, ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo, Usage
from proxy.sse import SSEEvent, loads

log = logging.getLogger(__name__)

CALL_ITEMS = ("function_call", "custom_tool_call")
FINISH_FROM_INCOMPLETE = {"max_output_tokens": ir.LENGTH, "content_filter": ir.CONTENT_FILTER}
# Responses error codes (SDK ResponseError.code, and those Codex recognises) → the proxy's kinds.
KIND_FROM_CODE = {
    "rate_limit_exceeded": "rate_limit", "slow_down": "rate_limit",
    "server_is_overloaded": "overloaded",
    "insufficient_quota": "billing", "usage_not_included": "billing",
    "server_error": "api_error",
    "vector_store_timeout": "timeout",
    "model_not_found": "not_found",
    "context_length_exceeded": "invalid_request", "invalid_prompt": "invalid_request",
    "bio_policy": "invalid_request", "cyber_policy": "invalid_request",
    "misalignment_policy_violation": "invalid_request",
}

Key = tuple[str, int]  # one piece of an item: ("text" | "refusal", content_index), ("summary", i), …


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _obj(doc: Any, key: str) -> dict[str, Any]:
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}


def _str(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    return value if isinstance(value, str) else ""


def objects(doc: dict[str, Any], key: str) -> list[Any]:
    """A list field of an item (content parts, summary parts); anything else counts as empty."""
    value = doc.get(key)
    return value if isinstance(value, list) else []


def _index(doc: dict[str, Any], key: str) -> int:
    return _int(doc.get(key))


def usage_from_responses(raw: Any) -> Usage | None:
    """Responses usage → IR usage (both count cached tokens in the input, reasoning in the output)."""
    if not isinstance(raw, dict):
        return None
    prompt, completion = _obj(raw, "input_tokens_details"), _obj(raw, "output_tokens_details")
    return Usage(input_tokens=_int(raw.get("input_tokens")), output_tokens=_int(raw.get("output_tokens")),
                 cache_read_tokens=_int(prompt.get("cached_tokens")),
                 cache_write_tokens=_int(prompt.get("cache_write_tokens")),
                 reasoning_tokens=_int(completion.get("reasoning_tokens")))


def error_from_responses(error: Any, default_message: str = "upstream reported that the response failed") -> ErrorInfo:
    """A Responses error object — `response.error`, or an `error` event in its nested or flat form."""
    error = error if isinstance(error, dict) else {}
    code = error.get("code") if isinstance(error.get("code"), str) and error.get("code") else None
    utype = error.get("type") if isinstance(error.get("type"), str) and error.get("type") else None
    kind = KIND_FROM_CODE.get(code or "") or KIND_FOR_ERROR_TYPE.get(utype or "", "api_error")
    message = _str(error, "message") or default_message
    param = error.get("param") if isinstance(error.get("param"), str) else None
    return ErrorInfo(kind=kind, message=scrub(message), status=KIND_STATUS[kind], code=code, param=param,
                     upstream_type=utype)


def finish_from_responses(doc: dict[str, Any], saw_calls: bool, incomplete: bool = False) -> str:
    """The finish reason of a finished response object: incomplete says why; else calls or stop."""
    if incomplete or doc.get("status") == "incomplete" or doc.get("incomplete_details"):
        reason = _str(_obj(doc, "incomplete_details"), "reason")
        return FINISH_FROM_INCOMPLETE.get(reason, ir.LENGTH)  # any other cut-off still stopped the output
    return ir.TOOL_CALLS if saw_calls else ir.STOP


def call_arguments(item: dict[str, Any]) -> str:
    """A function_call item's arguments as JSON text; a few compatible servers send an object."""
    arguments = item.get("arguments")
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False) if arguments is not None else ""


def has_calls(output: Any) -> bool:
    return isinstance(output, list) and any(isinstance(i, dict) and i.get("type") in CALL_ITEMS for i in output)


@dataclass(slots=True)
class _Item:
    """The output item being streamed."""

    type: str
    id: str
    emitted: set[Key] = field(default_factory=set)  # pieces whose text has been delivered
    last: Key | None = None  # the piece reasoning text last came from, to separate the next one


class ResponsesStreamDecoder:
    def __init__(self) -> None:
        self._started = False
        self._done = False
        self._item: _Item | None = None
        self._open: Key | None = None  # the open block: ("text"|"refusal", i) in a message, or ("item", 0)
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
        try:
            payload = loads(data)
        except ValueError:
            return self._fail([], "upstream sent a malformed JSON event in its stream")
        if not isinstance(payload, dict):
            return self._fail([], "upstream sent a stream event that is not a JSON object")
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
            self._start(_obj(payload, "response"), out)
        handler(self, payload, out)
        return out

    def close(self) -> list[Event]:
        """The upstream stream ended: without a terminal event, it broke off."""
        if self._done:
            return []
        if not self._started:
            return self._fail([], "upstream closed the stream without sending any event")
        return self._fail([], "upstream closed the stream before it finished")

    # ------------------------------------------------------------ lifecycle

    def _start(self, response: dict[str, Any], out: list[Event]) -> None:
        # Normally response.created; any other event first still starts the answer rather than lose it.
        if self._started:
            return
        self._started = True
        out.append(Start(id=_str(response, "id") or "resp_" + uuid.uuid4().hex,
                         model=_str(response, "model"),
                         created=_int(response.get("created_at")) or int(time.time())))

    def _on_lifecycle(self, payload: dict[str, Any], out: list[Event]) -> None:
        pass  # created / in_progress / queued: the Start, if any, was made in feed

    def _on_completed(self, payload: dict[str, Any], out: list[Event]) -> None:
        self._finish(payload, out, incomplete=False)

    def _on_incomplete(self, payload: dict[str, Any], out: list[Event]) -> None:
        self._finish(payload, out, incomplete=True)

    def _finish(self, payload: dict[str, Any], out: list[Event], incomplete: bool) -> None:
        """response.completed / response.incomplete: usage, then the finish reason."""
        response = _obj(payload, "response")
        self._end_item(out)
        usage = usage_from_responses(response.get("usage"))
        if usage is not None:
            out.append(UsageUpdate(usage))
        self._done = True
        saw_calls = self._saw_calls or has_calls(response.get("output"))
        out.append(Finish(finish_from_responses(response, saw_calls, incomplete)))

    def _on_failed(self, payload: dict[str, Any], out: list[Event]) -> None:
        self._done = True
        out.append(Failure(error_from_responses(_obj(payload, "response").get("error"))))

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
        item = _obj(payload, "item")
        self._end_item(out)
        itype, item_id = _str(item, "type"), _str(item, "id")
        self._item = _Item(itype, item_id)
        if itype == "reasoning":
            self._open_block(("item", 0), ReasoningPart(id=item_id or None), out)
        elif itype in CALL_ITEMS:
            self._saw_calls = True
            call_id = _str(item, "call_id") or "call_" + uuid.uuid4().hex[:24]
            call = ToolCallPart(call_id, _str(item, "name"), item_id=item_id or None)
            if itype == "custom_tool_call":
                call.kind = "custom"
            self._open_block(("item", 0), call, out)
        elif itype != "message":
            self._item.type = "skip"
            log.info("skipping an upstream %s item: clients of other protocols have no place for it", itype)

    def _on_item_done(self, payload: dict[str, Any], out: list[Event]) -> None:
        item = _obj(payload, "item")
        if not self._announced(item):
            self._on_item_added(payload, out)  # a final item whose output_item.added never came
        itype = self._item.type if self._item is not None else "skip"
        if itype == "message":
            for i, part in enumerate(objects(item, "content")):
                if isinstance(part, dict):
                    self._content_done(i, part, out)
        elif itype == "reasoning":
            self._reasoning_done(item, out)
        elif itype == "function_call":
            self._fill(("arguments", 0), call_arguments(item), out)
        elif itype == "custom_tool_call":
            self._fill(("input", 0), _str(item, "input"), out)
        self._end_item(out)

    def _announced(self, item: dict[str, Any]) -> bool:
        current, item_id = self._item, _str(item, "id")
        itype = _str(item, "type")
        if current is None or current.type != (itype if itype in ("message", "reasoning", *CALL_ITEMS) else "skip"):
            return False
        return not current.id or not item_id or current.id == item_id

    def _reasoning_done(self, item: dict[str, Any], out: list[Event]) -> None:
        for kind, key in (("summary", "summary"), ("text", "content")):
            for i, part in enumerate(objects(item, key)):
                if isinstance(part, dict):
                    self._fill((kind, i), _str(part, "text"), out)
        encrypted = item.get("encrypted_content")
        if isinstance(encrypted, str) and encrypted and self._open == ("item", 0):
            out.append(Signature(encrypted=encrypted))

    def _end_item(self, out: list[Event]) -> None:
        self._close_block(out)
        self._item = None

    # ------------------------------------------------------------ message content

    def _on_part_added(self, payload: dict[str, Any], out: list[Event]) -> None:
        part = _obj(payload, "part")
        kind = {"output_text": "text", "refusal": "refusal"}.get(_str(part, "type"))
        if kind is not None and self._message() is not None:
            self._open_content((kind, _index(payload, "content_index")), out)

    def _on_part_done(self, payload: dict[str, Any], out: list[Event]) -> None:
        if self._item is not None and self._item.type == "message":
            self._content_done(_index(payload, "content_index"), _obj(payload, "part"), out)
            self._close_block(out)

    def _content_done(self, index: int, part: dict[str, Any], out: list[Event]) -> None:
        ptype = _str(part, "type")
        if ptype == "output_text":
            self._fill(("text", index), _str(part, "text"), out)
        elif ptype == "refusal":
            self._fill(("refusal", index), _str(part, "refusal"), out)

    def _on_text(self, kind: str, field_name: str, payload: dict[str, Any], out: list[Event]) -> None:
        if self._message() is not None:
            key = (kind, _index(payload, "content_index"))
            text = _str(payload, field_name)
            if field_name == "delta":
                self._piece(key, text, out)
            else:
                self._fill(key, text, out)

    def _message(self) -> _Item | None:
        """The message item text belongs to; text with no item announced opens one (lenient servers)."""
        if self._item is None:
            self._item = _Item("message", "")
        return self._item if self._item.type == "message" else None

    def _open_content(self, key: Key, out: list[Event]) -> None:
        if self._open != key:
            self._open_block(key, TextPart("") if key[0] == "text" else RefusalPart(""), out)

    # ------------------------------------------------------------ reasoning and calls

    def _on_reasoning(self, kind: str, index_name: str, field_name: str, payload: dict[str, Any],
                      out: list[Event]) -> None:
        if self._item is None or self._item.type != "reasoning":
            return
        key, text = (kind, _index(payload, index_name)), _str(payload, field_name)
        if field_name == "delta":
            self._piece(key, text, out)
        else:
            self._fill(key, text, out)

    def _on_call(self, itype: str, field_name: str, piece: str, payload: dict[str, Any], out: list[Event]) -> None:
        if self._item is None or self._item.type != itype:
            return
        text = _str(payload, field_name)
        if field_name == "delta":
            self._piece((piece, 0), text, out)
        else:
            self._fill((piece, 0), text, out)

    # ------------------------------------------------------------ delivery

    def _piece(self, key: Key, text: str, out: list[Event]) -> None:
        """Deliver text of one piece of the current item into its block."""
        item = self._item
        if not text or item is None:
            return
        if item.type == "message":
            self._open_content(key, out)
        elif self._open != ("item", 0):
            return  # the item's block is already closed
        elif item.type == "reasoning" and item.last is not None and item.last != key:
            out.append(Delta("\n\n"))  # summary parts are paragraphs; keep them apart as the API shows them
        out.append(Delta(text))
        item.emitted.add(key)
        item.last = key

    def _fill(self, key: Key, text: str, out: list[Event]) -> None:
        """Text a `.done` event or final item carries: delivered only if no delta already did."""
        if self._item is not None and key not in self._item.emitted:
            self._piece(key, text, out)

    def _open_block(self, key: Key, part: OutputPart, out: list[Event]) -> None:
        self._close_block(out)
        out.append(BlockStart(part))
        self._open = key

    def _close_block(self, out: list[Event]) -> None:
        if self._open is not None:
            out.append(BlockStop())
            self._open = None

    def _fail(self, out: list[Event], message: str) -> list[Event]:
        self._done = True
        out.append(Failure(ErrorInfo(kind="upstream_error", message=message, status=502)))
        return out


def _text(kind: str, field_name: str) -> Any:
    return lambda self, payload, out: self._on_text(kind, field_name, payload, out)


def _reasoning(kind: str, index_name: str, field_name: str) -> Any:
    return lambda self, payload, out: self._on_reasoning(kind, index_name, field_name, payload, out)


def _call(itype: str, field_name: str, piece: str) -> Any:
    return lambda self, payload, out: self._on_call(itype, field_name, piece, payload, out)


_HANDLERS = {
    "response.created": ResponsesStreamDecoder._on_lifecycle,
    "response.in_progress": ResponsesStreamDecoder._on_lifecycle,
    "response.queued": ResponsesStreamDecoder._on_lifecycle,
    "response.output_item.added": ResponsesStreamDecoder._on_item_added,
    "response.output_item.done": ResponsesStreamDecoder._on_item_done,
    "response.content_part.added": ResponsesStreamDecoder._on_part_added,
    "response.content_part.done": ResponsesStreamDecoder._on_part_done,
    "response.output_text.delta": _text("text", "delta"),
    "response.output_text.done": _text("text", "text"),
    "response.refusal.delta": _text("refusal", "delta"),
    "response.refusal.done": _text("refusal", "refusal"),
    "response.reasoning_summary_text.delta": _reasoning("summary", "summary_index", "delta"),
    "response.reasoning_summary_text.done": _reasoning("summary", "summary_index", "text"),
    "response.reasoning_text.delta": _reasoning("text", "content_index", "delta"),
    "response.reasoning_text.done": _reasoning("text", "content_index", "text"),
    "response.function_call_arguments.delta": _call("function_call", "delta", "arguments"),
    "response.function_call_arguments.done": _call("function_call", "arguments", "arguments"),
    "response.custom_tool_call_input.delta": _call("custom_tool_call", "delta", "input"),
    "response.custom_tool_call_input.done": _call("custom_tool_call", "input", "input"),
    "response.completed": ResponsesStreamDecoder._on_completed,
    "response.incomplete": ResponsesStreamDecoder._on_incomplete,
    "response.failed": ResponsesStreamDecoder._on_failed,
    "error": ResponsesStreamDecoder._on_error,
}
