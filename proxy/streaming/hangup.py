"""A client that hangs up before its streamed (or whole) answer begins.

Owns the watch on the client's socket while the relay waits for an upstream's headers, a whole
answer or a stream's first event (docs/architecture.md §6.6): a hang-up then raises `ClientGone` in
the waiting greenlet, which abandons the upstream connection at once.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import gevent

from proxy.upstream.sockets import peek


class ClientGone(BaseException):
    """The client hung up before its answer started. A BaseException, like GreenletExit, so that no
    `except Exception` between here and the blocked upstream read can swallow it."""


@contextlib.contextmanager
def hangup_aborts(sock: socket.socket | None) -> Iterator[None]:
    """While the body runs — waiting for upstream headers, a non-streamed answer, a stream's first
    event — a client hang-up raises ClientGone in this greenlet, which abandons (and so closes) the
    upstream connection at once instead of after the upstream finishes working for nobody."""
    if sock is None:
        yield
        return
    target = gevent.getcurrent()
    readable = gevent.get_hub().loop.io(sock.fileno(), 1)

    def client_readable() -> None:
        # Run by the hub while `target` is parked in some wait, so the throw lands in that wait,
        # now. (gevent.kill would deliver it at the next switch, which can come after this block
        # has ended — mid-stream, or in the server's write — as an unhandled error.)
        left = peer_left(sock)
        if left is None:
            return
        readable.stop()
        if left:
            target.throw(ClientGone)

    readable.start(client_readable)
    try:
        yield
    finally:
        readable.stop()  # also drops a callback already due: nothing arrives after the block


def peer_left(sock: socket.socket) -> bool | None:
    """Once the client's socket is readable: True if the client hung up, False if it sent data
    (pipelining, which is not a hang-up), None if there was nothing after all."""
    waiting = peek(sock)
    return None if waiting is None else not waiting
