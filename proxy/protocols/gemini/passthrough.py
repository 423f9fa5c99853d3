"""Passthrough: a Gemini client in front of a Gemini upstream.

Owns relaying the upstream's answer as it came — every field, `thoughtSignature`s included, since
Gemini validates them byte for byte — while the Gemini stream decoder watches the stream for usage,
its end and failures; and the little a request needs on the way up: the fields the proxy added
from the URL come off (the upstream's URL names the model), and the signatures are made valid for
this upstream (`signatures.py`: the proxy's own tokens off, the skip value where a step has none).
The upstream always streams SSE (`?alt=sse`); a client that asked for the JSON-array form gets
each event as an element of one array, streamed.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.config import Upstream
from proxy.ir.events import Finish
from proxy.ir.response import ErrorInfo
from proxy.protocols.exchange import Exchange
from proxy.protocols.gemini.errors import error_body
from proxy.protocols.gemini.framing import JSON_ARRAY_CONTENT_TYPE, SSE_KEEPALIVE, ArrayWriter, sse_error, sse_frame
from proxy.protocols.gemini.signatures import sign_current_turn, without_minted
from proxy.protocols.gemini.stream_decode import GeminiStreamDecoder
from proxy.protocols.gemini.vocabulary import URL_KEY
from proxy.protocols.sse import SSEEvent
from proxy.protocols.transcode import WatchedPassthrough, add_usage


def prepare_request(ex: Exchange, body: dict[str, Any], model: str, upstream: Upstream) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if k not in ("model", URL_KEY)}
    contents = out.get("contents")
    if isinstance(contents, list):
        out["contents"] = sign_current_turn(without_minted(contents))
    return out


def relayed_error(doc: dict[str, Any], info: ErrorInfo) -> dict[str, Any] | None:
    """A Gemini upstream's error body as it came, when it is in Gemini's envelope."""
    error = doc.get("error")
    return doc if isinstance(error, dict) and isinstance(error.get("message"), str) else None


class GeminiPassthroughStream(WatchedPassthrough):
    """The upstream's SSE events to the client, as SSE or as the elements of one JSON array."""

    def __init__(self, upstream: Upstream, sse: bool) -> None:
        super().__init__(GeminiStreamDecoder(upstream))
        self.sse = sse
        self.content_type = None if sse else JSON_ARRAY_CONTENT_TYPE
        self._array = ArrayWriter()

    def relay(self, sse: SSEEvent) -> list[bytes]:
        return [sse_frame(sse.data) if self.sse else self._array.element(sse.data)]

    def close(self) -> list[bytes]:
        if self.done:
            return []
        for ev in self.watch.close():  # Gemini has no terminator: the stream's end says it finished
            self.usage = add_usage(self.usage, ev)
            self.answer.note(ev)
            if isinstance(ev, Finish):
                self.done = True
            elif hasattr(ev, "error"):
                return self.fail(ev.error)
        return [] if self.sse or not self.done else [self._array.end()]

    def keepalive(self) -> list[bytes]:
        # Never an SSE comment, which breaks both Gemini SDKs: a blank line (framing.py).
        return [SSE_KEEPALIVE] if self.sse else [self._array.keepalive()]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        self.done, self.failed = True, info
        body = error_body(info)
        return [sse_error(body)] if self.sse else [self._array.element(body), self._array.end()]

    def upstream_failed(self, sse: SSEEvent, info: ErrorInfo) -> list[bytes]:
        self.done, self.failed = True, info
        if self.sse:  # the upstream's own error object, bare, as gemini-cli recognises it (framing.py)
            return [sse.data + b"\r\n\r\n"]
        return [self._array.element(sse.data), self._array.end()]


def stream_relay(ex: Exchange, upstream: Upstream) -> GeminiPassthroughStream:
    return GeminiPassthroughStream(upstream, sse=bool(ex.body.get(URL_KEY, {}).get("sse")))
