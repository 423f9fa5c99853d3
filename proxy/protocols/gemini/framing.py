"""How a Gemini stream is framed for a client: SSE (`?alt=sse`) or one JSON array, streamed.

Owns the bytes between the GenerateContentResponse objects (docs/protocols.md §16.2, §7):
- With `alt=sse` each is an SSE event `data: {…}` on one line, ending in CRLF CRLF as Google's
  servers send (both google-genai SDKs split events on either line ending; @google/genai's parser,
  which gemini-cli uses, reads only single-line `data:` fields), and there is no `[DONE]`: the
  stream's end is the end.
- **Keepalive: a bare blank line.** An SSE comment (`: keepalive`) breaks both SDKs — @google/genai's
  regex stops matching for the rest of the stream, google-genai Python parses the line as JSON and
  raises — while a blank line is skipped by both (tried with gemini-cli 0.61 and google-genai 3.6).
- **A failure after the first byte is the bare error object, in a write of its own**, not a `data:`
  event: gemini-cli reads a `data: {"error": …}` event as a chunk without candidates and ends with
  exit 0 ("ended without a finish reason"), but raises a real error on the bare object; the Python
  SDK raises on both.
- Without `alt=sse` the answer is a JSON array written as it goes — `[`, the elements separated by
  `,\r\n`, `]` at the end — and, since JSON allows whitespace between elements, a newline is a
  harmless keepalive once `[` is out.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.protocols.sse import dumps

JSON_ARRAY_CONTENT_TYPE = "application/json; charset=UTF-8"
SSE_KEEPALIVE = b"\r\n"


def _json(doc: Any) -> bytes:
    return doc if isinstance(doc, bytes) else dumps(doc)


def sse_frame(doc: Any) -> bytes:
    """One event: a response object (or its JSON bytes, relayed as they came)."""
    return b"data: " + _json(doc) + b"\r\n\r\n"


def sse_error(body: dict[str, Any]) -> bytes:
    """A failure in an SSE stream: the error object bare, then the blank line that ends an event."""
    return dumps(body) + b"\r\n\r\n"


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
