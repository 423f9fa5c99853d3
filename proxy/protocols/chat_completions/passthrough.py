"""Passthrough for streams: a Chat client in front of an OpenAI-compatible upstream.

Owns relaying the upstream's chunks with every field we do not know intact, while fixing what
compatible servers get wrong and real clients trip over (docs/protocols.md §3.4):
`object` other than `chat.completion.chunk` (the SDK helper drops such chunks), an id that is
not stable or not `chatcmpl-…` (e.g. `stream:chat:<uuid>`), an empty model (the client always
sees the model it asked for), `role` / tool-call `id` / `name` repeated in later deltas (the SDK
helper concatenates them), tool-call entries without `index` or `function`, a finish reason
repeated or one that says the answer stopped (`"stop"`, `"eos"`, …) after tool calls, usage on a
chunk that still has choices, and a stream that just closes after its finish reason (`data: [DONE]`
ends every finished stream; a stream that fails ends with the error chunk alone, as the real API's
does). The quirks the stream decoder handles too are fixed with the same helpers (`chunks`).

The proxy asks the upstream for usage even when the client did not, so the pool can count
tokens; the usage chunk is then kept from the client, who sees what it asked for.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.chat_completions.chunks import (
    arguments_text,
    done_before_any_chunk,
    error_in_chunk,
    infer_tool_index,
)
from proxy.protocols.chat_completions.errors import stream_error_frames
from proxy.protocols.chat_completions.response import new_call_id, new_id
from proxy.protocols.chat_completions.vocabulary import finish_from_chat, stopped_after_calls, usage_from_chat
from proxy.protocols.fields import count
from proxy.protocols.sse import DONE_FRAME, KEEPALIVE_COMMENT, SSEEvent, data_frame
from proxy.protocols.transcode import NOTHING_DROPPED, closed_early, parse_payload

_MISSING = object()


def _model_field(name: str) -> bytes:
    """`"model":"<name>"` as servers write it compactly."""
    return b'"model":' + json.dumps(name, ensure_ascii=False).encode()


def _swap_model(data: bytes, before: bytes, after: bytes) -> bytes | None:
    """The chunk's bytes with its model field `before` replaced by `after`, when it appears exactly
    once; None (write the chunk anew) otherwise."""
    if data.count(before) != 1:
        return None
    return data.replace(before, after)


class _ChoiceState:
    __slots__ = ("finished", "role_sent", "tool_ids", "tools_seen")

    def __init__(self) -> None:
        self.role_sent = False
        self.finished = False
        self.tools_seen: set[int] = set()
        self.tool_ids: dict[str, int] = {}


class ChatPassthroughStream:
    def __init__(self, model: str, client_wants_usage: bool) -> None:
        self.model = model
        self.client_wants_usage = client_wants_usage
        self.usage: Usage | None = None
        self.done = False
        self.failed: ErrorInfo | None = None
        self.final: dict[str, Any] | None = None  # Chat keeps no conversation on the proxy
        self.dropped: Mapping[str, int] = NOTHING_DROPPED  # it leaves nothing out
        self._id: str | None = None
        self._created = 0
        self._choices: dict[int, _ChoiceState] = {}
        self._finished_any = False
        self._started = False
        self._dirty = False  # the chunk being relayed was changed, so it must be written anew
        self._model_from: str | None = None  # the upstream's model name in this chunk, to be replaced
        self._swap: tuple[str, bytes, bytes] | None = None  # that name, its field and the client's (_model_fields)
        # What the answer said of itself, read when the stream ends (traces): the model that answered
        # as the upstream named it, and why it finished (the IR's words).
        self.response_model: str | None = None
        self.finish_reason: str | None = None

    def feed(self, sse: SSEEvent) -> list[bytes]:
        if self.done:
            return []
        data = sse.data.strip()
        if not data:
            return []
        if data == b"[DONE]":
            if not self._started:
                return self.fail(done_before_any_chunk())
            self.done = True
            return [DONE_FRAME]
        try:
            text = data.decode("utf-8")
            self._dirty = False
        except UnicodeDecodeError:  # a sloppy server's broken character: U+FFFD, and write the chunk anew
            text = data.decode("utf-8", "replace")
            self._dirty = True
        chunk = parse_payload(text, "chunk")
        if isinstance(chunk, ErrorInfo):
            return self.fail(chunk)
        self._started = True
        if chunk.get("error"):
            return self._upstream_error(chunk)
        chunks = self._normalise(chunk)
        if not self._dirty and len(chunks) == 1:
            # Nothing needed fixing: the upstream's own bytes, without a JSON round trip — except,
            # commonly, the model name (upstreams answer with a dated one), swapped in place.
            raw = data if self._model_from is None else _swap_model(data, *self._model_fields(self._model_from))
            if raw is not None:
                return [b"data: " + raw + b"\n\n"]
        return [data_frame(c) for c in chunks]

    @property
    def response_id(self) -> str | None:
        return self._id

    @property
    def answer(self) -> ChatPassthroughStream:
        """What the answer said of itself (id, model, finish reason): this relay keeps it itself."""
        return self

    def close(self) -> list[bytes]:
        """Upstream EOF: terminate properly, or report that the stream broke off."""
        if self.done:
            return []
        if self._finished_any:
            self.done = True
            return [DONE_FRAME]
        return self.fail(closed_early(self._started))

    def keepalive(self) -> list[bytes]:
        return [KEEPALIVE_COMMENT]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.done:
            return []
        self.done = True
        self.failed = info
        return stream_error_frames(info)

    def _upstream_error(self, chunk: dict[str, Any]) -> list[bytes]:
        """An error object inside the stream: relay it as the upstream worded it when it has the
        OpenAI shape (codes such as context_length_exceeded matter to clients), and end there —
        no `[DONE]` after an error, so the client can tell the answer was cut."""
        self.failed = error_in_chunk(chunk)
        self.done = True
        err = chunk["error"]
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return [data_frame({"error": err})]
        return stream_error_frames(self.failed)

    # ------------------------------------------------------------ normalisation

    def _normalise(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunks the client gets for this one (written out only when they differ from it)."""
        if self._id is None:
            upstream_id = chunk.get("id")
            self._id = upstream_id if isinstance(upstream_id, str) and upstream_id.startswith("chatcmpl-") \
                else new_id()
            self._created = count(chunk.get("created")) or int(time.time())
        self._set(chunk, "id", self._id)
        self._set(chunk, "object", "chat.completion.chunk")
        self._set(chunk, "created", self._created)
        upstream_model = chunk.get("model")
        self._model_from = None
        if upstream_model and self.response_model is None and isinstance(upstream_model, str):
            self.response_model = upstream_model
        if isinstance(upstream_model, str) and upstream_model != self.model:
            self._model_from = upstream_model  # the only change to many chunks: see feed()
            chunk["model"] = self.model
        elif upstream_model != self.model:
            self._set(chunk, "model", self.model)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            chunk["choices"] = choices = []
            self._dirty = True
        for position, choice in enumerate(choices):
            if isinstance(choice, dict):
                self._choice(choice, position)
        raw_usage = chunk.get("usage")
        usage = usage_from_chat(raw_usage)
        if usage is None:
            if not self.client_wants_usage and "usage" in chunk:
                del chunk["usage"]
                self._dirty = True
            return [chunk]
        self.usage = usage
        if not self.client_wants_usage:
            # We asked for usage on the client's behalf: keep it from the client.
            del chunk["usage"]
            self._dirty = True
            return [chunk] if choices else []
        if not choices:
            return [chunk]
        # Usage must travel in its own chunk with empty choices, after the one with the choices.
        chunk["usage"] = None
        return [chunk, {**chunk, "choices": [], "usage": raw_usage}]

    def _model_fields(self, upstream_model: str) -> tuple[bytes, bytes]:
        """The upstream's model field and the client's, encoded once per stream (an upstream names
        the same model in every chunk)."""
        if self._swap is None or self._swap[0] != upstream_model:
            self._swap = (upstream_model, _model_field(upstream_model), _model_field(self.model))
        return self._swap[1], self._swap[2]

    def _set(self, obj: dict[str, Any], key: str, value: Any) -> None:
        if obj.get(key, _MISSING) != value or key not in obj:
            obj[key] = value
            self._dirty = True

    def _choice(self, choice: dict[str, Any], position: int) -> None:
        index = choice.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = position
            self._set(choice, "index", index)
        state = self._choices.get(index)
        if state is None:
            state = self._choices[index] = _ChoiceState()
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            choice["delta"] = delta = {}
            self._dirty = True
        if "role" in delta:
            if state.role_sent or delta["role"] != "assistant":
                del delta["role"]
                self._dirty = True
            else:
                state.role_sent = True
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for entry in calls:
                if isinstance(entry, dict):
                    self._tool_entry(entry, state)
        elif "tool_calls" in delta and calls is None:
            del delta["tool_calls"]
            self._dirty = True
        reason = choice.get("finish_reason")
        if not reason or state.finished:
            self._set(choice, "finish_reason", None)
        else:
            state.finished = True
            self._finished_any = True
            self.finish_reason = finish_from_chat(reason, bool(state.tools_seen))
            if stopped_after_calls(reason, bool(state.tools_seen)):
                self._set(choice, "finish_reason", "tool_calls")

    def _tool_entry(self, entry: dict[str, Any], state: _ChoiceState) -> None:
        index = entry.get("index")
        call_id = entry.get("id")
        if not isinstance(index, int) or isinstance(index, bool):
            index = infer_tool_index(call_id, state.tool_ids, state.tools_seen)
            self._set(entry, "index", index)
        if entry.get("type") == "custom":
            state.tools_seen.add(index)
            return
        fn = entry.get("function")
        if not isinstance(fn, dict):
            entry["function"] = fn = {}
            self._dirty = True
        if index in state.tools_seen:
            # Only the first delta of a call names it; repeats would be concatenated by clients.
            for obj, key in ((entry, "id"), (entry, "type"), (fn, "name")):
                if key in obj:
                    del obj[key]
                    self._dirty = True
        else:
            state.tools_seen.add(index)
            if not call_id:
                call_id = new_call_id()
                self._set(entry, "id", call_id)
            state.tool_ids[str(call_id)] = index
            self._set(entry, "type", "function")
            if "arguments" not in fn:
                self._set(fn, "arguments", "")
        arguments = fn.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            fn["arguments"] = arguments_text(arguments)
            self._dirty = True

