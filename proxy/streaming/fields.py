"""What one stream holds, and the values it hands back.

Owns the fields of a `StreamingBody`, declared once, by the piece that uses them (the engine's
loop, its wait, the direct-write mode), so each piece can be read alone; the outcome a stream
reports (`StreamOutcome`); the failure it raises before anything reached the client
(`EarlyStreamFailure`); and the server's side of the direct-write mode (`ClientWriter`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Generator
from typing import Any, Protocol

import requests

from proxy.config import Streaming
from proxy.ir.response import ErrorInfo
from proxy.protocols.sse import SSEParser
from proxy.protocols.transcode import StreamRelay
from proxy.upstream.body import UpstreamBody, UpstreamBodyError


class EarlyStreamFailure(Exception):
    """The upstream failed before the client received anything: the caller may retry."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.message)
        self.info = info


class StreamOutcome:
    """How a stream ended, for the relay's accounting."""

    __slots__ = ("__weakref__", "client_gone", "error", "frames", "usage")

    def __init__(self) -> None:
        self.frames = 0
        self.client_gone = False
        self.error: ErrorInfo | None = None
        self.usage: Any = None


class ClientWriter(Protocol):
    """The client's side of a response, for writing its body below the WSGI server (given by the
    server's adapter, proxy/serving/direct_write.py)."""

    socket: Any  # the client's gevent socket

    def ready(self) -> bool:
        """The server has sent the status line and the headers: body bytes may follow."""

    def wire(self, payload: bytes) -> bytes:
        """`payload` framed as the response's body goes on the wire (one HTTP chunk, or as it is)."""

    def count(self, n: int) -> None:
        """`n` body bytes went out (the server's own count, for its access log)."""


class StreamTap(Protocol):
    """Who is given a copy of what a stream carries (the request log's capture, proxy.ops.records):
    the upstream's bytes as read and the client's frames as written. Called on the hot path: it
    keeps references, nothing more."""

    def upstream_chunk(self, data: bytes) -> None: ...

    def client_frames(self, frames: list[bytes]) -> None: ...


class StreamFields:
    """The fields of one stream (the slots are `StreamingBody`'s), and the steps one piece calls in
    another."""

    # Slots: a thousand idle streams are a thousand of these (and the engine holds them weakly).
    __slots__ = (
        "__weakref__",
        "_body",
        "_carried_read",
        "_client",
        "_client_readable",
        "_client_signalled",
        "_closed",
        "_first_byte_by",
        "_frames",
        "_frames_before_failure",
        "_handoff",
        "_hub",
        "_hub_error",
        "_hung_up",
        "_interrupted",
        "_last_data",
        "_last_write",
        "_late",
        "_loop",
        "_on_close",
        "_on_end",
        "_os_socket",
        "_outcome",
        "_parser",
        "_primed",
        "_read_again",
        "_relay",
        "_settings",
        "_tap",
        "_timer",
        "_unsent",
        "_upstream",
        "_upstream_ready",
        "_waiting",
        "_writer",
    )

    # The stream: its upstream, its relay, its settings, what it reports, how it ends.
    _upstream: requests.Response
    _body: UpstreamBody
    _relay: StreamRelay
    _settings: Streaming
    _tap: StreamTap | None
    _parser: SSEParser
    _outcome: StreamOutcome
    _on_close: Callable[[StreamOutcome], None] | None
    _on_end: Callable[[], None] | None
    _closed: bool
    _frames: Generator[bytes, None, None]
    _primed: list[bytes]
    _interrupted: ErrorInfo | None
    _frames_before_failure: int | None
    _first_byte_by: float | None
    _late: ErrorInfo | None
    _last_data: float
    _last_write: float
    _read_again: bool
    # The wait (proxy.streaming.waiting): the hub, its watchers, the greenlet parked, the client.
    _hub: Any
    _loop: Any
    _upstream_ready: Any
    _client: socket.socket | None
    _client_readable: Any
    _client_signalled: bool
    _hung_up: bool
    _timer: Any
    _waiting: Any
    # Writing below the server (proxy.streaming.direct): the writer, the OS socket under its gevent
    # socket, and what the hub's relay step hands the greenlet.
    _writer: ClientWriter | None
    _os_socket: Any
    _unsent: bytes | None
    _handoff: list[bytes] | None
    _carried_read: bytes | UpstreamBodyError | None
    _hub_error: Exception | None

    def _translate(self, data: bytes | None) -> list[bytes]:
        raise NotImplementedError  # the engine's

    def _relay_in_hub(self) -> bool:
        raise NotImplementedError  # the direct-write mode's
