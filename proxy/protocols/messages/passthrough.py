"""Passthrough: a Messages client in front of an Anthropic upstream.

Owns one change made to a passthrough request — thinking blocks whose signature the proxy made
(for reasoning that came from another upstream) are left out, since Anthropic rejects a signature
it did not issue; the other, a broken tool history, is `tool_pairs`'s — and, for streams, relaying
the upstream's events byte for byte — unknown event types, unknown fields, thinking signatures and
server-tool blocks included — while watching them, through the Messages stream decoder, for what
the relay loop needs: usage for the pool's books, whether the stream finished, and whether (and
how) it failed. Only when the upstream breaks off without `message_stop` does the proxy add bytes
of its own: the `event: error` the client's SDK raises on, since nothing else would tell it the
answer is incomplete — and, for a client that did not enable thinking, when the upstream thinks
anyway: its thinking blocks are left out (the real API sends none then) and later blocks renumbered.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import logging
from typing import Any

from proxy.ir.reasoning import is_minted
from proxy.ir.response import ErrorInfo
from proxy.protocols.messages.errors import stream_error_frame
from proxy.protocols.messages.stream_decode import MessagesStreamDecoder
from proxy.protocols.messages.stream_encode import PING
from proxy.protocols.sse import SSEEvent, event_frame, loads, named_frame
from proxy.protocols.transcode import WatchedPassthrough

THINKING_BLOCKS = ("thinking", "redacted_thinking")
BLOCK_EVENTS = ("content_block_start", "content_block_delta", "content_block_stop")

log = logging.getLogger(__name__)


def without_foreign_thinking(messages: Any) -> Any:
    """The messages minus thinking blocks signed by the proxy; the same list when there are none."""
    if not isinstance(messages, list) or not any(_has_minted(m) for m in messages):
        return messages
    log.info("leaving out thinking blocks the proxy signed: an Anthropic upstream would reject them")
    out = []
    for message in messages:
        if _has_minted(message):
            message = {**message, "content": [b for b in message["content"] if not _minted_block(b)]}
        out.append(message)
    return out


def _has_minted(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(_minted_block(b) for b in content)


def _minted_block(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "thinking" and is_minted(block.get("signature"))


def without_thinking(body: dict[str, Any], dropped: dict[str, int]) -> dict[str, Any]:
    """A whole Message minus thinking blocks, for a client that did not enable thinking."""
    content = body.get("content")
    if not isinstance(content, list):
        return body
    kept = [b for b in content if not (isinstance(b, dict) and b.get("type") in THINKING_BLOCKS)]
    if len(kept) != len(content):
        dropped["reasoning"] = dropped.get("reasoning", 0) + len(content) - len(kept)
        body["content"] = kept
    return body


class MessagesPassthroughStream(WatchedPassthrough):
    def __init__(self, thinking: bool = True) -> None:
        super().__init__(MessagesStreamDecoder(relayed=True))
        self._thinking = thinking
        self._dropped_indices: list[int] = []  # upstream indices of thinking blocks left out

    def relay(self, sse: SSEEvent) -> list[bytes]:
        if self._thinking or sse.event not in BLOCK_EVENTS:
            return [event_frame(sse)]
        # A client that did not enable thinking gets none, even from an upstream that thinks anyway:
        # its thinking blocks are left out and the blocks after them renumbered, so indices stay 0, 1, 2…
        payload = loads(sse.data)  # the watcher has parsed it already: it is a JSON object
        index = payload.get("index")
        if not isinstance(index, int):
            return [event_frame(sse)]
        if sse.event == "content_block_start" and (payload.get("content_block") or {}).get("type") in THINKING_BLOCKS:
            self._dropped_indices.append(index)
            # Counted for the request's log line, in a mapping of its own (not the shared empty one).
            self.dropped = {**self.dropped, "reasoning": self.dropped.get("reasoning", 0) + 1}
            return []
        if index in self._dropped_indices:
            return []
        shift = sum(1 for dropped in self._dropped_indices if dropped < index)
        if not shift:
            return [event_frame(sse)]
        return [named_frame(sse.event, {**payload, "index": index - shift})]

    def keepalive(self) -> list[bytes]:
        return [PING]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.done:
            return []
        self.done, self.failed = True, info
        return [stream_error_frame(info)]

    def upstream_failed(self, sse: SSEEvent, info: ErrorInfo) -> list[bytes]:
        self.done = True
        if sse.event == "error":
            return [event_frame(sse)]  # the upstream's own error event, as it sent it
        return [stream_error_frame(info)]  # a malformed upstream event: say so in the protocol's words
