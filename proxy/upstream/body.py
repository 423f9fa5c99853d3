"""A streamed upstream body read straight from its socket, without ever blocking.

Owns the bytes between a streamed upstream response's headers and the end of its body: HTTP/1.1
framing (chunked, Content-Length, or until the upstream closes), gzip/deflate should an upstream
compress a stream it was asked to send plain, and handing the connection back to `requests`' pool
when the body ended cleanly so the next request reuses it.

Why not `resp.raw.read()`: that blocks the calling greenlet inside http.client, so keepalives and
hang-up detection then need a second greenlet and a queue, and those hand-offs cost more CPU per
relayed chunk than everything else in the relay (docs/architecture.md §6). Here `read()` returns what
the socket already has, or None; the streaming engine waits on `fileno()` itself, together with its
own deadlines and the client's socket, in the one greenlet that writes to the client.

The layout reached into (urllib3 2's response over http.client's, over a socket's makefile) is
checked when a body is opened; `requests>=2.32` with `urllib3>=2,<3` is what setup.cfg allows.
"""

from __future__ import annotations

import socket
import ssl
import zlib
from typing import Any

import requests

from proxy.ir.response import ErrorInfo

READ_SIZE = 65536
MAX_CHUNK_LINE = 4096  # a chunk-size or trailer line longer than this is not HTTP


class UpstreamBodyError(Exception):
    """The body broke off or is not valid HTTP; `info` is what the client is told in-band, `detail`
    what the log is told."""

    def __init__(self, info: ErrorInfo, detail: str = "") -> None:
        super().__init__(info.message)
        self.info = info
        self.detail = detail or info.message


def broken(detail: str) -> UpstreamBodyError:
    return UpstreamBodyError(ErrorInfo(
        "upstream_error", "the upstream connection broke before the stream finished", 502), detail)


class ChunkedDecoder:
    """`Transfer-Encoding: chunked` → body bytes, fed in arbitrary pieces. `done` once the last
    chunk and its trailers have arrived; bytes after that are not part of this body."""

    __slots__ = ("_buf", "_left", "_state", "done")

    def __init__(self) -> None:
        self._buf = b""
        self._left = 0  # bytes still to come of the current chunk's data
        self._state = "size"  # size | data | data_end | trailer
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        self._buf = b""
        out: list[bytes] = []
        pos, end = 0, len(buf)
        while pos < end and not self.done:
            if self._state == "data":
                take = min(self._left, end - pos)
                out.append(buf[pos:pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = "data_end"
                continue
            lf = buf.find(b"\n", pos)
            if lf == -1:
                if end - pos > MAX_CHUNK_LINE:
                    raise broken("a chunk header line is too long")
                self._buf = buf[pos:]
                break
            line = buf[pos:lf].rstrip(b"\r")
            pos = lf + 1
            if self._state == "size":
                self._size_line(line)
            elif self._state == "data_end":
                if line:
                    raise broken("chunk data did not end where its size said")
                self._state = "size"
            elif not line:  # trailer section ends with an empty line
                self.done = True
                self._buf = buf[pos:]  # not this body's: the connection must not be reused
        return out[0] if len(out) == 1 else b"".join(out)

    @property
    def trailing_garbage(self) -> bool:
        return self.done and bool(self._buf)

    def _size_line(self, line: bytes) -> None:
        digits = line.split(b";", 1)[0].strip()
        try:
            size = int(digits, 16)
        except ValueError:
            raise broken("an invalid chunk size") from None
        if not digits.isalnum():  # int() would also take "+1", " 1" or "1_0"
            raise broken("an invalid chunk size")
        if size:
            self._left, self._state = size, "data"
        else:
            self._state = "trailer"


class UpstreamBody:
    """The body of one streamed upstream response. `read()` never blocks: it returns body bytes,
    None when the socket has nothing yet (wait until `fileno()` is readable, unless `pending()`),
    or b"" once the body is complete. Raises UpstreamBodyError if the body breaks off."""

    def __init__(self, resp: requests.Response) -> None:
        self._resp = resp
        http: Any = getattr(resp.raw, "_fp", None)
        buffered: Any = getattr(http, "fp", None)
        sock = getattr(getattr(buffered, "raw", None), "_sock", None)
        if not isinstance(sock, socket.socket):
            raise RuntimeError("the upstream response is not laid out as urllib3 2 over http.client; "
                               "check the installed requests/urllib3 versions")
        self._http, self._sock = http, sock
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._timeout = sock.gettimeout()
        sock.settimeout(0.0)
        self._chunked = ChunkedDecoder() if http.chunked else None
        self._left: int | None = http.length  # Content-Length still to come; None: until close
        self._reusable = not http.will_close
        self._ended = self._released = False
        self._refused: UpstreamBodyError | None = None
        try:
            self._inflate = _inflater(resp.headers.get("Content-Encoding", ""))
        except UpstreamBodyError as exc:  # told on the first read, like any other broken body
            self._refused, self._inflate = exc, None
        # http.client read the headers through a buffer that may already hold the first body bytes.
        try:
            self._head: bytes | None = buffered.read1(READ_SIZE) or None
        except (ssl.SSLWantReadError, BlockingIOError):
            self._head = None
        # Everything from here on is read from the socket itself: closing http.client's reader now
        # frees its 8 KiB buffer for the life of the stream (a fifth of an idle stream's memory).
        # Not when the connection ends with this response: http.client has closed its socket
        # already, and the reader is what keeps it open until the body is read.
        if not http.will_close:
            buffered.close()
            http.fp = None  # http.client takes a response without a reader as one read to its end

    def fileno(self) -> int:
        return self._sock.fileno()

    def pending(self) -> bool:
        """The next `read()` has an answer without waiting on the socket: bytes read with the
        headers, bytes TLS holds decrypted (the socket no longer shows them as readable), or the
        end of the body — read along with its last bytes, it is b"" now, and the socket (back in
        the pool, or the upstream's to keep open) will say nothing more."""
        return self._head is not None or self._ended or (self._tls and self._sock.pending() > 0)  # type: ignore[attr-defined]

    def read(self) -> bytes | None:
        if self._refused is not None:
            raise self._refused
        if self._ended:
            return b""
        if self._head is not None:
            data, self._head = self._head, None
        else:
            try:
                data = self._sock.recv(READ_SIZE)
            except (BlockingIOError, ssl.SSLWantReadError, InterruptedError):
                return None
            except OSError as exc:
                raise broken(type(exc).__name__) from None
            if not data:
                return self._eof()
        body = self._frame(data)
        if self._inflate is not None and body:
            body = self._inflate(body)
        if self._ended:
            self._release()
            if not body:
                return b""
        return body or None

    def worth_finishing(self) -> bool:
        """The body has not ended but its connection could go back to the pool once it does."""
        return not self._ended and self._refused is None and self._reusable

    def close(self) -> None:
        """Give the socket its blocking timeout back; `requests` then closes the connection, unless
        the body ended cleanly and it is back in the pool already."""
        if not self._released:
            self._released = True
            self._sock.settimeout(self._timeout)

    def _frame(self, data: bytes) -> bytes:
        if self._chunked is not None:
            body = self._chunked.feed(data)
            self._ended = self._chunked.done
            return body
        if self._left is not None:
            body = data[:self._left]
            self._left -= len(body)
            self._ended = not self._left
            return body
        return data

    def _eof(self) -> bytes:
        if self._chunked is not None:
            raise broken("it closed before the last chunk")
        if self._left:
            raise broken(f"it closed {self._left} bytes short of its Content-Length")
        self._ended = True
        self._reusable = False
        return b""

    def _release(self) -> None:
        """The body is complete: hand the connection back to the pool (or let it be closed)."""
        self._released = True
        self._sock.settimeout(self._timeout)
        if self._reusable and not (self._chunked is not None and self._chunked.trailing_garbage):
            self._http.close()  # http.client's side is finished; the socket itself stays open
            self._resp.raw.release_conn()


def _inflater(encoding: str) -> Any:
    """A decompressor for the body's Content-Encoding, None for plain bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(32 + zlib.MAX_WBITS).decompress  # 32: gzip or zlib header, found by zlib
    raise UpstreamBodyError(ErrorInfo(
        "upstream_error", f"the upstream compressed its stream with {encoding!r}, which the proxy cannot "
                          "decode (it asked for an uncompressed stream)", 502))
