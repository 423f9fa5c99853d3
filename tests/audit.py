"""The suite's secret audit: every byte a test client receives from a proxy, and every line a proxy
logs, is scanned for every upstream key a test configured, and for the secret of every named client
key (whose name, not key, is what logs and usage show).

`start_proxy` registers each proxy's keys and log file; the raw wire client and the SDKs' HTTP
transport (httpx, patched for the session in conftest) pass what they receive through `Tap`s.
At the end of the session conftest fails the run if any key was seen. Scanning as bytes arrive,
with a carry-over of one key's length, finds a key split across two reads without keeping the
suite's whole output in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

try:  # the HTTP client the installed openai / anthropic SDKs are built on
    import httpx2 as httpx
except ImportError:  # older SDK releases
    import httpx  # type: ignore[no-redef]

keys: set[bytes] = set()
log_paths: list[Path] = []
leaks: list[str] = []
bytes_seen = 0


def register(api_keys: Iterable[str], log_path: Path | None = None) -> None:
    # Shorter strings are test placeholders (an admin request with api_key "x" that must be refused):
    # scanning for them would match ordinary text.
    keys.update(k.encode() for k in api_keys if len(k) >= 8)
    if log_path is not None:
        log_paths.append(log_path)


class Tap:
    """Scans one response's bytes as they are read."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.carry = b""

    def feed(self, data: bytes) -> bytes:
        global bytes_seen
        bytes_seen += len(data)
        window = self.carry + data
        for key in keys:
            if key in window:
                leaks.append(f"{key.decode()!r} in a response to {self.where}")
        longest = max((len(k) for k in keys), default=1)
        self.carry = window[-(longest - 1):] if longest > 1 else b""
        return data


class TappedReader:
    """A socket file wrapper for tests/wire.py: reads pass through a Tap."""

    def __init__(self, reader: Any, where: str) -> None:
        self.reader, self.tap = reader, Tap(where)

    def readline(self, *args: Any) -> bytes:
        return self.tap.feed(self.reader.readline(*args))

    def read(self, *args: Any) -> bytes:
        return self.tap.feed(self.reader.read(*args))

    def close(self) -> None:
        self.reader.close()


class TappedStream(httpx.SyncByteStream):
    """An httpx byte stream wrapper: what the SDKs receive passes through a Tap."""

    def __init__(self, stream: Any, where: str) -> None:
        self.stream, self.tap = stream, Tap(where)

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.stream:
            yield self.tap.feed(chunk)

    def close(self) -> None:
        self.stream.close()


def tap_httpx() -> Any:
    """Patch httpx's transport so every response body passes through a Tap; returns the undo."""
    original = httpx.HTTPTransport.handle_request

    def handle_request(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        response = original(self, request)
        response.stream = TappedStream(response.stream, f"{request.method} {request.url.path}")
        return response

    httpx.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
    return lambda: setattr(httpx.HTTPTransport, "handle_request", original)


def scan_logs() -> None:
    for path in log_paths:
        if not path.exists():
            continue
        text = path.read_bytes()
        leaks.extend(f"{key.decode()!r} in {path}" for key in keys if key in text)
