"""How a stream waits: at once for the upstream socket, its own deadline and the client's socket.

Owns parking the stream's greenlet on watchers, not greenlets — nothing runs for a stream while it
waits, and waking costs one switch (docs/architecture.md §6.3) — and what a watcher that fires
means: the upstream has bytes (relayed in the hub by the direct-write mode when it can), the
deadline came, the client's socket became readable (a hang-up, or its next request early), or
the stream was interrupted.
"""

from __future__ import annotations

import gevent

from proxy.streaming.fields import StreamFields
from proxy.streaming.hangup import peer_left

# What woke a waiting stream.
UPSTREAM, CLIENT, DEADLINE, INTERRUPT = "upstream", "client", "deadline", "interrupt"


class Waiting(StreamFields):
    __slots__ = ()

    def _wait(self, seconds: float) -> str:
        """Park this greenlet until the upstream socket is readable, `seconds` pass, the client's
        socket is readable or `interrupt()` is called; say which. Watchers, not greenlets: nothing
        runs for a stream while it waits, and waking costs one switch. The watchers stay started
        from one wait to the next (starting and stopping them for every chunk was a measurable
        share of its CPU); `_wake` stops one that fires while the greenlet is busy elsewhere."""
        if self._body.pending():
            return UPSTREAM
        if self._client_signalled:
            self._client_signalled = False
            return CLIENT
        if seconds <= 0:
            return DEADLINE
        wake = self._wake
        if not self._upstream_ready.active:
            self._upstream_ready.start(wake, UPSTREAM)
        client = self._client_readable
        if client is not None and not client.active:
            client.start(wake, CLIENT)
        # Deadlines only move later, so a timer still running fires at or before this one: it
        # may wake us early (the loop then waits again), never late.
        if self._timer is None or not self._timer.active:
            self._timer = self._loop.timer(seconds)
            self._timer.start(wake, DEADLINE)
        self._waiting = gevent.getcurrent()
        try:
            return self._hub.switch()
        finally:
            self._waiting = None
            self._read_again = True

    def _wake(self, why: str) -> None:
        """Run by the hub when a watcher fires or an interrupt is due: resume the greenlet if it is
        parked in `_wait`. If it is not (it is writing to the client), a readable socket would fire
        again on every turn of the loop, so its watcher stops until the next wait; a client that
        became readable is remembered."""
        waiting = self._waiting
        if waiting is not None:
            if why is UPSTREAM and self._os_socket is not None and self._writer is not None \
                    and self._writer.ready() and self._relay_in_hub():
                return
            waiting.switch(why)
        elif why is UPSTREAM:
            self._upstream_ready.stop()
        elif why is CLIENT and self._client_readable is not None:
            self._client_readable.stop()
            self._client_signalled = True

    def _stop_watching(self) -> None:
        self._upstream_ready.stop()
        if self._client_readable is not None:
            self._client_readable.stop()
        if self._timer is not None:
            self._timer.stop()

    def _client_left(self) -> bool:
        """The client's socket became readable while we waited: a hang-up, or the client sending
        its next request early (pipelining), after which its socket is no longer watched."""
        assert self._client is not None
        left = peer_left(self._client)
        if left is False and self._client_readable is not None:
            self._client_readable.stop()
            self._client_readable = None
        return bool(left)
