"""Writing a streamed response's body below gunicorn's `Response.write`, for the streaming engine.

Owns the one thing the engine needs from the WSGI server to put its frames on the client's socket
itself: the socket, the body's transfer framing (`Transfer-Encoding: chunked` or none) and the
count of body bytes the access log reports. Gunicorn's write path costs a format, a join, a
`getsockopt` system call and a timed loop in gevent's `sendall` for every frame; a stream's frames
are small and many, so the engine frames them itself and sends each step's frames in one `send`
(docs/architecture.md §6.1).

`attach_direct_writer` wraps the WSGI app in the gevent worker: when the app returns a body that
can write itself (`StreamingBody.write_directly`) to a plain TCP client socket, the body is given
a `GunicornWriter` over gunicorn's own response object. Anything else — a TLS socket, a response
with a Content-Length, a body something else wrapped — goes through gunicorn's write as before.
Must not write anything itself: the engine decides when; gunicorn still sends the status line,
the headers, the first frame and the terminating chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gevent import socket as gsocket

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class GunicornWriter:
    """The client side of one gunicorn response, as the streaming engine writes to it."""

    __slots__ = ("_resp", "chunked", "socket")

    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self.socket = resp.sock
        self.chunked = bool(resp.chunked)

    def ready(self) -> bool:
        """The status line and headers are out: body bytes may follow."""
        return bool(self._resp.headers_sent)

    def wire(self, payload: bytes) -> bytes:
        """`payload` as it goes on the wire: one HTTP chunk, or as it is."""
        return b"%X\r\n%b\r\n" % (len(payload), payload) if self.chunked else payload

    def count(self, n: int) -> None:
        """`n` body bytes went out (the access log's response size)."""
        self._resp.sent += n


def attach_direct_writer(app: WSGIApp) -> WSGIApp:
    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = app(environ, start_response)
        write_directly = getattr(body, "write_directly", None)
        resp = getattr(start_response, "__self__", None)
        if write_directly is not None and resp is not None and writable_directly(resp):
            write_directly(GunicornWriter(resp))
        return body

    return wsgi


def writable_directly(resp: Any) -> bool:
    """A gunicorn response whose body the engine can frame: no Content-Length cap to honour, a
    body to send at all, and a plain (not TLS) gevent socket."""
    return (getattr(resp, "response_length", 0) is None and not getattr(resp, "_omits_body", False)
            and type(getattr(resp, "sock", None)) is gsocket.socket and hasattr(resp, "sent")
            and hasattr(resp, "chunked") and hasattr(resp, "headers_sent"))
