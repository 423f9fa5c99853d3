"""A raw HTTP/1.1 client for wire tests: exact bytes, and each chunked-encoding chunk as it arrives.

Libraries reassemble the body; these tests need to see the framing itself — that every write
the proxy makes is exactly one complete SSE frame — and to hang up at precise moments.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tests import audit


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]  # lower-cased names
    sock: socket.socket
    reader: Any
    chunks: list[bytes] = field(default_factory=list)

    def next_chunk(self) -> bytes | None:
        """The next HTTP chunk of a chunked body, or None at its end."""
        size_line = self.reader.readline()
        if not size_line:
            return None
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            self.reader.readline()
            return None
        data = self.reader.read(size)
        self.reader.read(2)
        self.chunks.append(data)
        return data

    def rest(self) -> list[bytes]:
        while self.next_chunk() is not None:
            pass
        return self.chunks

    def body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            return b"".join(self.rest())
        length = int(self.headers.get("content-length", "0"))
        return self.reader.read(length)

    def json(self) -> Any:
        return json.loads(self.body())

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def request(base: str, method: str, path: str, body: bytes | dict[str, Any] | None = None,
            headers: dict[str, str] | None = None, timeout: float = 20) -> RawResponse:
    url = urlsplit(base)
    sock = socket.create_connection((url.hostname, url.port), timeout=timeout)
    if isinstance(body, dict):
        body = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    lines = [f"{method} {path} HTTP/1.1", f"Host: {url.hostname}:{url.port}"]
    all_headers = dict(headers or {})
    if body is not None and not any(k.lower() == "content-length" for k in all_headers):
        all_headers["Content-Length"] = str(len(body))
    lines += [f"{k}: {v}" for k, v in all_headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
    reader = audit.TappedReader(sock.makefile("rb"), f"{method} {path}")
    status_line = reader.readline()
    status = int(status_line.split()[1])
    resp_headers: dict[str, str] = {}
    while True:
        line = reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        resp_headers[name.strip().lower()] = value.strip()
    return RawResponse(status, resp_headers, sock, reader)


def sse_data(frame: bytes) -> Any:
    """The JSON of a `data: …` frame (or the string "[DONE]")."""
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n"), frame
    payload = frame[6:-2]
    return "[DONE]" if payload == b"[DONE]" else json.loads(payload)
