"""A client hang-up noticed just as the upstream answers must not surface later, mid-stream, as an
unhandled ClientGone (the soak run found this: a traceback in the log for each such request)."""

from __future__ import annotations

import gevent
from gevent import socket

from proxy.streaming import ClientGone, hangup_aborts


def run_once(hang_up_first: bool, upstream_answers: bool = True) -> str:
    client, client_peer = socket.socketpair()  # the client's connection, as the proxy holds it
    upstream, upstream_peer = socket.socketpair()

    def both_at_once() -> None:  # the client leaves and the upstream answers in one loop turn
        if not upstream_answers:
            client_peer.close()
        elif hang_up_first:
            client_peer.close()
            upstream_peer.send(b"x")
        else:
            upstream_peer.send(b"x")
            client_peer.close()

    try:
        try:
            with hangup_aborts(client):
                gevent.spawn(both_at_once)
                upstream.recv(1)  # waiting for the upstream's answer
        except ClientGone:
            return "aborted"  # the intended outcome when the hang-up wins
        try:
            gevent.sleep(0.002)  # the stream goes on: nothing may be thrown in here any more
        except ClientGone:
            return "late"
        return "answered"
    finally:
        for sock in (client, upstream, upstream_peer, client_peer):
            sock.close()


def test_no_hangup_is_delivered_after_the_context_ends() -> None:
    outcomes = [run_once(hang_up_first=i % 2 == 0) for i in range(400)]
    assert "late" not in outcomes


def test_a_hang_up_while_the_upstream_is_silent_aborts_the_wait() -> None:
    assert [run_once(hang_up_first=True, upstream_answers=False) for _ in range(50)] == ["aborted"] * 50
