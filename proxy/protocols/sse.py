"""Server-sent events on bytes: an incremental parser for upstream streams and frame writers.

Owns SSE framing in both directions. The parser works on raw bytes and splits lines on CR, LF
and CRLF only — never `str.splitlines`, which also splits on U+2028/U+2029 and so tears apart
JSON that legitimately contains them. It scans each byte once, so a single line of several MB
that arrives in many small reads stays linear-time.

Why not sseclient-py: it re-concatenates the pending event on every line (`data += line`),
which is quadratic for the multi-MB single lines that tool arguments produce, and it pulls
from a blocking iterator where the streaming engine needs to push the bytes it has.

Must not import Flask or requests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_CR = 0x0D
_LF = 0x0A


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event. `data` keeps the raw bytes (multi-line data joined with LF)."""

    event: str | None
    data: bytes


class SSEParser:
    """Feed bytes as they arrive; get back the events that became complete."""

    __slots__ = ("_buf", "_data", "_event", "_has_data", "_pending_cr", "_scan")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # everything before this offset in _buf holds no line terminator
        self._pending_cr = False  # last byte seen was CR: a following LF belongs to it
        self._event: str | None = None
        self._data: list[bytes] = []
        self._has_data = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        if self._pending_cr:
            self._pending_cr = False
            if chunk[0] == _LF:
                chunk = chunk[1:]
        buf = self._buf
        buf += chunk
        events: list[SSEEvent] = []
        start = 0
        pos = self._scan
        n = len(buf)
        no_lf_after = n  # once a search finds no LF, later lines in this chunk need not look again
        while pos < n:
            lf = buf.find(b"\n", pos) if pos < no_lf_after else -1
            if lf == -1:
                no_lf_after = pos
            cr = buf.find(b"\r", pos, lf if lf != -1 else n)
            if cr == -1 and lf == -1:
                break
            if cr != -1:
                end = cr
                if cr + 1 < n:
                    nxt = cr + 2 if buf[cr + 1] == _LF else cr + 1
                else:
                    # CR is the last byte so far: the line is complete, but a LF may follow.
                    nxt = cr + 1
                    self._pending_cr = True
            else:
                end = lf
                nxt = lf + 1
            self._line(bytes(buf[start:end]), events)
            start = pos = nxt
        if start:
            del buf[:start]
        self._scan = len(buf)
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: a final event without its blank line still counts (as browsers do not,
        but upstreams that close right after the last `data:` line expect us to)."""
        events: list[SSEEvent] = []
        if self._buf:
            self._line(bytes(self._buf), events)
            self._buf.clear()
            self._scan = 0
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._has_data:
                events.append(SSEEvent(self._event, b"\n".join(self._data)))
            self._event = None
            self._data = []
            self._has_data = False
            return
        if line[0] == 0x3A:  # ':' comment
            return
        colon = line.find(b":")
        if colon == -1:
            name, value = line, b""
        else:
            name = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._has_data = True
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        # `id` and `retry` are deliberately ignored: we never re-emit ids (docs/protocols.md §2.2).


def loads(data: bytes) -> Any:
    """JSON from an upstream event. Invalid UTF-8 (a truncated multi-byte character from a sloppy
    server) becomes U+FFFD instead of failing the whole stream; invalid JSON still raises ValueError."""
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        return json.loads(data.decode("utf-8", "replace"))


# ---------------------------------------------------------------- writing frames

KEEPALIVE_COMMENT = b": keepalive\n\n"
DONE_FRAME = b"data: [DONE]\n\n"


# One encoder for every frame: json.dumps with any non-default option builds a JSONEncoder per
# call, a quarter of the cost of encoding a small event.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON, as the real APIs send it (no ASCII escaping of non-ASCII text)."""
    return _COMPACT.encode(obj).encode("utf-8")


def data_frame(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


def named_frame(event: str, obj: Any) -> bytes:
    return b"event: " + event.encode("ascii") + b"\ndata: " + dumps(obj) + b"\n\n"


def named_after_type(sse: SSEEvent) -> SSEEvent:
    """An event that came without an `event:` line, named after its JSON `type` (the Anthropic and
    Responses SDKs dispatch on the name, so an unnamed `message_stop` would go unseen)."""
    if sse.event is not None:
        return sse
    try:
        payload = loads(sse.data)
    except ValueError:
        return sse
    kind = payload.get("type") if isinstance(payload, dict) else None
    return SSEEvent(kind, sse.data) if isinstance(kind, str) and kind.isprintable() and kind else sse


def event_frame(sse: SSEEvent) -> bytes:
    """An event as the Anthropic and OpenAI APIs frame it — `event: NAME`, then one `data: ` line
    per line of data, then a blank line — so a passthrough gives back the bytes it received."""
    head = f"event: {sse.event}\n".encode() if sse.event is not None else b""
    data = sse.data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:  # a sloppy server's broken character: U+FFFD, as on every other path
        data = data.decode("utf-8", "replace").encode("utf-8")
    return head + b"".join(b"data: " + line + b"\n" for line in data.split(b"\n")) + b"\n"
