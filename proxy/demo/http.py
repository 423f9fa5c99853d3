"""A deliberately small HTTP/1.1 server for the simulated upstream, on gevent's StreamServer.

Owns the bytes on the wire: the demo (and the tests' fault upstreams) must be able to stream
with chunked framing, pause, drop the connection mid-stream, and notice at once when the proxy
hangs up — things a WSGI server hides. Supports keep-alive and Content-Length request bodies,
which is all `requests` sends.
"""

from __future__ import annotations

import contextlib
import itertools
import select
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gevent.server import StreamServer

REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden",
           404: "Not Found", 413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout", 529: "Overloaded"}


@dataclass
class HTTPRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    body: bytes
    extra: dict[str, Any] = field(default_factory=dict)
    connection: int = 0  # which TCP connection it came on (numbered from 1), to see connection reuse


class PeerGone(Exception):
    """The client (the proxy) closed the connection."""


class Writer:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.close_after = False
        self._chunked = False
        self.started = False
        self.sent = 0  # body bytes handed to the socket so far

    def response(self, status: int, body: bytes, content_type: str = "application/json",
                 headers: dict[str, str] | None = None) -> None:
        headers = dict(headers or {})
        length = headers.pop("Content-Length", str(len(body)))  # a test may announce a length it won't send
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", f"Content-Type: {content_type}",
                 f"Content-Length: {length}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self._send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        self.started = True

    def start_stream(self, content_type: str = "text/event-stream", chunked: bool = True) -> None:
        framing = "Transfer-Encoding: chunked" if chunked else "Connection: close"
        head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nCache-Control: no-cache\r\n{framing}\r\n\r\n"
        self._send(head.encode("latin-1"))
        self._chunked = chunked
        self.close_after = not chunked
        self.started = True

    def send(self, data: bytes) -> None:
        if self.peer_closed():
            raise PeerGone()
        self.sent += len(data)
        if self._chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self._send(data)

    def end(self) -> None:
        if self._chunked:
            self._send(b"0\r\n\r\n")

    def drop(self) -> None:
        """Close the connection without finishing the response."""
        self.close_after = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def peer_closed(self) -> bool:
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
            return bool(readable) and self.sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            raise PeerGone() from None


Handler = Callable[[HTTPRequest, Writer], None]


def serve(listener: socket.socket, handler: Handler) -> StreamServer:
    connections = itertools.count(1)

    def handle(sock: socket.socket, _addr: Any) -> None:
        connection = next(connections)
        # Without this, Nagle's algorithm holds each small SSE write until the previous one is
        # ACKed, and the client's delayed ACK turns that into ~40 ms per event.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rfile = sock.makefile("rb")
        try:
            while True:
                req = _read_request(rfile)
                if req is None:
                    return
                req.connection = connection
                writer = Writer(sock)
                try:
                    handler(req, writer)
                except PeerGone:
                    return
                if writer.close_after or req.headers.get("connection", "").lower() == "close":
                    return
        finally:
            try:
                rfile.close()
                sock.close()
            except OSError:
                pass

    server = StreamServer(listener, handle)
    server.start()
    return server


def _read_request(rfile: Any) -> HTTPRequest | None:
    try:
        line = rfile.readline(65537)
    except OSError:
        return None
    if not line.strip():
        return None
    method, target, _version = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        raw = rfile.readline(65537)
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    body = rfile.read(length) if length else b""
    parts = urlsplit(target)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    return HTTPRequest(method.upper(), parts.path, query, headers, body)
