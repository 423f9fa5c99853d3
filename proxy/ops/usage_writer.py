"""Getting usage rows and recent-request entries into the `UsageStore` — exactly once each, and
before the client has seen the end of its answer.

Owns when records are written. Exactness decides it: a query on any worker must see every request
that has finished, with nothing buffered elsewhere that it cannot see, so each request's usage is
committed before its answer ends (the hook runs before a whole answer is returned, and before the
last bytes of a stream go out) — write-through. The cost is kept down two ways. When nothing is
being written and the store can write at once (SQLite: no other process holds the write lock), the
request's greenlet commits what is queued itself — tens of microseconds, where handing it to a
thread and back costs several times that. Otherwise, group commit: one writer greenlet per worker
commits everything waiting in one transaction on a real thread, so concurrent requests share a
commit; every `THREAD_EVERY`-th commit and every purge go that way too, so the file's checkpoints
(which sync it to disk) happen on the thread. An entry added without waiting (the recent list)
rides along with the next commit. A store that cannot write (Redis away, the state file's disk full)
keeps the batch in its buffer (proxy/ops/usage_buffer.py) and the request goes on; `retry`, on the
pool keeper's tick, has the writer try again. A commit slower than `WAIT_LIMIT` lets the request go
on (its rows stay queued and are written when the store answers). What is queued when the worker
exits is written by `flush_all`, from gunicorn's worker_exit hook.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable

import gevent
from gevent.event import Event

from proxy.ops.usage_store import RecentEntry, UsageRow, UsageStore
from proxy.upstream.keeper import blocking

log = logging.getLogger("proxy.usage")

WAIT_LIMIT = 5.0  # seconds a request waits for its commit before it goes on regardless
PURGE_EVERY = 600.0  # seconds between two retention purges by one worker (the first comes with its first write)
THREAD_EVERY = 100  # one commit in this many goes through the thread even when it could be made at once
_writers: weakref.WeakSet[UsageWriter] = weakref.WeakSet()  # an app dropped (tests) takes its writer along


class UsageWriter:
    def __init__(self, store: UsageStore, retention_days: int, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.retention_s = retention_days * 86400
        self.clock = clock
        self._usage: list[UsageRow] = []
        self._recent: list[RecentEntry] = []
        self._committed = Event()  # set once the batch being gathered now is written
        self._writing: Event | None = None  # the `_committed` of the batch being written, while it is
        self._wake = Event()
        self._greenlet: gevent.Greenlet | None = None
        self._next_purge = 0.0
        self._at_once = 0  # commits made at once since the last one on the thread
        _writers.add(self)

    def add(self, usage: UsageRow | None = None, recent: RecentEntry | None = None, wait: bool = True) -> None:
        """Queue a row and / or an entry; with `wait`, return once they are written."""
        if usage is not None:
            self._usage.append(usage)
        if recent is not None:
            self._recent.append(recent)
        if wait or not self.store.blocking:
            self.flush()
        else:
            self._start()

    def flush(self) -> None:
        """Return once everything queued so far is written (or `WAIT_LIMIT` has passed). Only the
        writer greenlet writes, one batch at a time, so the store's connection is never shared."""
        if not self._usage and not self._recent:
            committed = self._writing  # nothing queued: wait for the batch on its way, if any
            if committed is None:
                return
        elif not self.store.blocking:  # in memory: written at once, nothing to wait for
            self._commit()
            return
        elif self._writing is None and self._commit_at_once():
            return
        else:
            committed = self._committed
            self._start()
        if not committed.wait(WAIT_LIMIT):
            log.warning("usage: the state store took over %gs to write; the request goes on, its usage stays "
                        "queued", WAIT_LIMIT)

    def _commit_at_once(self) -> bool:
        """Write what is queued now, on this greenlet, if the store can without waiting; nothing
        else runs meanwhile (the store's call never yields), so the queue cannot change under it."""
        if self._at_once >= THREAD_EVERY or self.clock() >= self._next_purge:
            return False
        try:
            if not self.store.try_add(self._usage, self._recent):
                return False
        except Exception:  # the thread's attempt logs what it loses
            return False
        self._at_once += 1
        self._usage, self._recent = [], []
        self._committed.set()  # whoever queued into this batch is written too
        self._committed = Event()
        return True

    def _start(self) -> None:
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self._run)
        self._wake.set()

    def retry(self) -> None:
        """On the pool keeper's tick: have the writer greenlet write what the store keeps while it
        could not write (Redis away, the state file's disk full), if it keeps anything."""
        buffer = getattr(self.store, "buffer", None)
        if buffer is not None and buffer.pending():
            self._start()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self._commit()  # what is queued, and what the store kept from before
            while self._usage or self._recent:
                self._commit()

    def _commit(self) -> None:
        usage, recent, committed = self._usage, self._recent, self._committed
        self._usage, self._recent, self._committed = [], [], Event()
        self._writing = committed
        self._at_once = 0
        now = self.clock()
        purge = None
        if now >= self._next_purge:
            purge, self._next_purge = int(now - self.retention_s), now + PURGE_EVERY
        try:
            if self.store.blocking:
                blocking(self.store.add, usage, recent, purge)
            else:
                self.store.add(usage, recent, purge)
        except Exception:  # a store that keeps what it could not write says so; this is anything else
            log.exception("usage: writing %d usage rows and %d recent requests to the state store failed",
                          len(usage), len(recent))
            if purge is not None:
                self._next_purge = 0.0
        finally:
            self._writing = None
            committed.set()


def flush_all() -> None:
    """Write every writer's queue in this process (gunicorn's worker_exit hook calls this; the hub
    still runs there, as the pool keeper's last sync relies on too)."""
    for writer in list(_writers):
        try:
            writer.flush()
        except Exception:
            log.exception("usage: the last flush failed")
