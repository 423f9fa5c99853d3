"""How a Gemini stream is framed for a client: SSE (`?alt=sse`) or one JSON array, streamed.

Owns the bytes between the GenerateContentResponse objects. With `alt=sse` each is an SSE event
`data: {…}` ending in CRLF CRLF, as Google's servers send (both google-genai SDKs split events on
either line ending), and there is no `[DONE]`: the stream's end is the end. Without it the answer
is a JSON array written as it goes — `[`, the elements separated by `,\r\n`, `]` at the end — and,
since JSON allows whitespace between elements, a newline is a harmless keepalive once `[` is out.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.protocols.sse import dumps

JSON_ARRAY_CONTENT_TYPE = "application/json; charset=UTF-8"


def _json(doc: Any) -> bytes:
    return doc if isinstance(doc, bytes) else dumps(doc)


def sse_frame(doc: Any) -> bytes:
    """One event: a response object (or its JSON bytes, relayed as they came)."""
    return b"data: " + _json(doc) + b"\r\n\r\n"


class ArrayWriter:
    """The JSON-array form: opened by the first element or keepalive, closed once."""

    def __init__(self) -> None:
        self.opened = False
        self.count = 0
        self.closed = False

    def element(self, doc: Any) -> bytes:
        lead = b"[" if not self.opened else (b",\r\n" if self.count else b"")
        self.opened = True
        self.count += 1
        return lead + _json(doc)

    def keepalive(self) -> bytes:
        lead = b"" if self.opened else b"["
        self.opened = True
        return lead + b"\n"

    def end(self) -> bytes:
        if self.closed:
            return b""
        self.closed = True
        lead = b"" if self.opened else b"["
        self.opened = True
        return lead + b"]"
