"""The server side of one WebSocket connection under gunicorn's gevent worker, on simple-websocket.

Owns the connection itself — the upgrade, frames in and out, pings, the close — and the three
things simple-websocket's `Server` does not do the way a gateway needs:
- response headers on the `101 Switching Protocols` (clients read some of them, e.g. Codex's
  `x-codex-turn-state`), which its handshake has no parameter for;
- sends that are whole and never interleaved: its `send` writes with one `socket.send`, which may
  write only part of a large frame to a slow client, and its reader greenlet answers pings and
  sends its own pings on the same socket — so every write here goes through one lock and `sendall`;
- a callback when the connection ends (a close frame, the peer gone, a ping unanswered), run in its
  reader greenlet, so a response in progress can be abandoned at once.
permessage-deflate is negotiated when the client offers it (wsproto's `PerMessageDeflate`).

Must not know what travels over the connection (proxy.blueprints.responses_socket does).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from simple_websocket import ConnectionClosed, Server  # type: ignore[import-untyped]
from simple_websocket import ConnectionError as HandshakeFailed
from wsproto.events import AcceptConnection, RejectConnection, Request
from wsproto.extensions import PerMessageDeflate
from wsproto.utilities import RemoteProtocolError

log = logging.getLogger(__name__)

__all__ = ["BadUpgrade", "ConnectionClosed", "SocketServer"]


class BadUpgrade(Exception):
    """The request asked for a WebSocket but is not a valid upgrade (a missing `Sec-WebSocket-Key`, an
    unsupported `Sec-WebSocket-Version`, …). Nothing has been written: the caller answers over HTTP,
    with the status (400, or 426 and the versions spoken) and headers the WebSocket library advises."""

    def __init__(self, reason: str, status: int, headers: dict[str, str]) -> None:
        super().__init__(reason)
        self.reason, self.status, self.headers = reason, status, headers


class _WholeSends:
    """The client's socket, every write whole and one at a time (see the module docstring)."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._lock = threading.Lock()  # gevent's, once the worker has patched threading

    def send(self, data: bytes) -> int:
        with self._lock:
            self._sock.sendall(data)
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class SocketServer(Server):
    """simple-websocket's server with upgrade headers, whole sends and a close callback."""

    def __init__(self, environ: dict[str, Any], headers: Mapping[str, str], on_close: Callable[[], None],
                 ping_interval: float | None = None, max_message_size: int | None = None) -> None:
        self._upgrade_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self._on_close = on_close
        self._upgraded = False
        try:
            super().__init__(environ, ping_interval=ping_interval, max_message_size=max_message_size)
        except HandshakeFailed:
            raise BadUpgrade("the handshake did not complete", 400, {}) from None

    def handshake(self) -> None:
        self.sock: Any = _WholeSends(self.sock)
        try:
            super().handshake()
        except RemoteProtocolError as exc:
            hint = exc.event_hint
            if isinstance(hint, RejectConnection):
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in hint.headers}
                raise BadUpgrade(str(exc), hint.status_code, headers) from None
            raise BadUpgrade(str(exc), 400, {}) from None

    def _handle_events(self) -> bool:
        if self._upgraded:
            return bool(super()._handle_events())
        # The handshake's one event, the upgrade request: answered here, with our headers.
        self._upgraded = True
        for event in self.ws.events():
            if isinstance(event, Request):
                self.sock.send(self.ws.send(AcceptConnection(extensions=[PerMessageDeflate()],
                                                             extra_headers=self._upgrade_headers)))
                return True
        return False

    def _thread(self) -> None:
        try:
            super()._thread()
        finally:
            try:
                self._on_close()
            except Exception:
                log.exception("websocket close callback failed")
