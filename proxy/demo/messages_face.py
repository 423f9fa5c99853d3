"""The demo model's answer in the Anthropic Messages protocol, for the demo upstream's
`POST /v1/messages` face.

Owns writing the scenario's Chat chunks as Anthropic events, and a whole Chat completion as a
Message, with templates of its own: it deliberately does not use the proxy's encoders, so a bug in
an encoder cannot cancel out against the same bug in the upstream the tests run against. Like some
gateways, it keeps interleaved what the Chat chunks interleave — parallel tool calls whose argument
fragments alternate become tool_use blocks with alternating `index` — and writes Chat `annotations`
as `citations_delta` / `citations` (web_search_result_location). Thinking blocks end with the demo's
own signature (proxy.demo.tokens). Usage reports what the prompt cache read and wrote (given by the
demo's `PromptCache`) apart from `input_tokens`, as Anthropic does.
Pure: must not import Flask, requests or gevent.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from proxy.demo.tokens import Write, delta_of, demo_signature, digest, finish_of, frame

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def stop_reason(choice: dict[str, Any]) -> tuple[str, str | None]:
    """A Chat choice's finish as Anthropic's stop_reason and stop_sequence (the scenario says which
    stop sequence matched the way vLLM does, in `stop_reason`)."""
    matched = choice.get("stop_reason")
    if choice.get("finish_reason") == "stop" and isinstance(matched, str):
        return "stop_sequence", matched
    return STOP_REASONS.get(choice.get("finish_reason") or "stop", "end_turn"), None


# ---------------------------------------------------------------- Anthropic Messages


class AnthropicStream:
    """Chat chunks in; Anthropic events out, blocks keyed by `index` as the chunks open them."""

    def __init__(self, write: Write, model: str, input_tokens: int, cache: tuple[int, int] = (0, 0)) -> None:
        self._write, self._model, self._input, self._cache = write, model, input_tokens, cache
        self._started = self._stopped = False
        self._blocks: dict[str, int] = {}  # "thinking" | "text" | "tool:N" → open block index
        self._texts: dict[str, list[str]] = {}
        self._next = 0
        self._reason = "end_turn"
        self._stop_sequence: str | None = None

    def chunk(self, chunk: dict[str, Any]) -> None:
        if self._stopped:
            return
        if chunk.get("error"):
            self._event("error", error={"type": "api_error", "message": chunk["error"].get("message", "error")})
            self._stopped = True
            return
        if not self._started:
            self._started = True
            usage = {**prompt_usage(self._input, self._cache), "output_tokens": 1}
            self._event("message_start", message={
                "id": "msg_demo" + uuid.uuid4().hex[:16], "type": "message", "role": "assistant", "model": self._model,
                "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage})
            self._write(frame("ping", {"type": "ping"}))
        delta = delta_of(chunk)
        if delta.get("reasoning_content"):
            self._text_delta("thinking", "thinking_delta", "thinking", delta["reasoning_content"])
        if delta.get("content"):
            self._close("thinking")
            self._text_delta("text", "text_delta", "text", delta["content"])
        for annotation in delta.get("annotations") or ():
            self._cite(annotation)
        for call in delta.get("tool_calls") or ():
            self._tool(call)
        if finish_of(chunk):
            for key in sorted(self._blocks, key=self._blocks.__getitem__):
                self._close(key)
            self._reason, self._stop_sequence = stop_reason((chunk.get("choices") or [{}])[0])
        if chunk.get("usage"):
            self._end(chunk["usage"])

    def end(self) -> None:
        """The scenario ended; a stream that never reported usage still ends properly."""
        if self._started and not self._stopped:
            for key in sorted(self._blocks, key=self._blocks.__getitem__):
                self._close(key)
            self._end({"prompt_tokens": self._input, "completion_tokens": 0})

    def _text_delta(self, key: str, kind: str, field: str, text: str) -> None:
        if key not in self._blocks:
            self._open(key, {"type": "thinking", "thinking": "", "signature": ""} if key == "thinking"
                       else {"type": "text", "text": ""})
        self._texts[key].append(text)
        self._event("content_block_delta", index=self._blocks[key], delta={"type": kind, field: text})

    def _cite(self, annotation: dict[str, Any]) -> None:
        cited = annotation.get("url_citation") or {}
        if "text" not in self._blocks:
            return
        text = "".join(self._texts["text"])
        citation = {"type": "web_search_result_location", "url": cited.get("url"), "title": cited.get("title"),
                    "cited_text": text[cited.get("start_index", 0):cited.get("end_index", len(text))],
                    "encrypted_index": "demo-index." + digest(str(cited.get("url")))[:16]}
        self._event("content_block_delta", index=self._blocks["text"],
                    delta={"type": "citations_delta", "citation": citation})

    def _tool(self, call: dict[str, Any]) -> None:
        key = f"tool:{call.get('index', 0)}"
        fn = call.get("function") or {}
        if key not in self._blocks:
            self._close("thinking")
            self._close("text")
            self._open(key, {"type": "tool_use", "id": "toolu_" + str(call.get("id") or uuid.uuid4().hex[:12]),
                             "name": fn.get("name") or "", "input": {}})
        if fn.get("arguments"):
            self._event("content_block_delta", index=self._blocks[key],
                        delta={"type": "input_json_delta", "partial_json": fn["arguments"]})

    def _open(self, key: str, block: dict[str, Any]) -> None:
        self._blocks[key], self._texts[key] = self._next, []
        self._next += 1
        self._event("content_block_start", index=self._blocks[key], content_block=block)

    def _close(self, key: str) -> None:
        index = self._blocks.pop(key, None)
        if index is None:
            return
        if key == "thinking":
            self._event("content_block_delta", index=index,
                        delta={"type": "signature_delta", "signature": demo_signature("".join(self._texts[key]))})
        self._event("content_block_stop", index=index)

    def _end(self, usage: dict[str, Any]) -> None:
        self._event("message_delta", delta={"stop_reason": self._reason, "stop_sequence": self._stop_sequence},
                    usage={**prompt_usage(self._input, self._cache),
                           "output_tokens": usage.get("completion_tokens", 0)})
        self._event("message_stop")
        self._stopped = True

    def _event(self, kind: str, **fields: Any) -> None:
        self._write(frame(kind, {"type": kind, **fields}))


def prompt_usage(input_tokens: int, cache: tuple[int, int]) -> dict[str, int]:
    """The prompt's part of Anthropic's usage: `input_tokens` leaves out what was read from and
    written to the prompt cache (`cache`: read, write)."""
    read, write = cache
    return {"input_tokens": input_tokens - read - write, "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read}


def anthropic_message(completion: dict[str, Any], model: str, input_tokens: int,
                      cache: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """A whole Chat completion as an Anthropic Message."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        thinking = message["reasoning_content"]
        content.append({"type": "thinking", "thinking": thinking, "signature": demo_signature(thinking)})
    if message.get("content"):
        block: dict[str, Any] = {"type": "text", "text": message["content"]}
        for annotation in message.get("annotations") or ():
            cited = annotation.get("url_citation") or {}
            block.setdefault("citations", []).append({
                "type": "web_search_result_location", "url": cited.get("url"), "title": cited.get("title"),
                "cited_text": message["content"][cited.get("start_index", 0):cited.get("end_index")],
                "encrypted_index": "demo-index." + digest(str(cited.get("url")))[:16]})
        content.append(block)
    for call in message.get("tool_calls") or ():
        content.append({"type": "tool_use", "id": "toolu_" + call["id"], "name": call["function"]["name"],
                        "input": json.loads(call["function"]["arguments"] or "{}")})
    usage = completion.get("usage") or {}
    reason, sequence = stop_reason(choice)
    return {"id": "msg_demo" + uuid.uuid4().hex[:16], "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": reason, "stop_sequence": sequence,
            "usage": {**prompt_usage(input_tokens, cache), "output_tokens": usage.get("completion_tokens", 0)}}
