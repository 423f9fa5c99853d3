"""Whether this worker's state store can be used now: one `StoreHealth` per worker, shared by every
store of the worker that writes to it — the Redis-backed stores (the pool's states, usage, the
Responses store) with `state.backend: redis`, or the stores with tables in the `state_path` file.

Owns the up / degraded signal, its public reason, and the retry backoff. A store that fails to
reach Redis, or cannot write the state file (disk full, read-only: proxy/state/sqlite.py), calls
`failed`; from then on callers ask `may_try` before trying again, so a dead Redis or a full disk
costs one failed attempt per backoff period (0.5 s doubling up to 5 s), not one per request; the
first call that gets through calls `ok`. Readers: `/readyz` ("state": "degraded" and the reason),
the `llm_proxy_state_store_up` gauge, and anything that must fall back to per-host behaviour while
the shared store is away (`AppState.store_health.up`). Pure: no IO, no gevent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("proxy.state")

FIRST_BACKOFF = 0.5  # seconds before the first reconnect attempt
MAX_BACKOFF = 5.0  # the longest wait between two attempts


class StoreHealth:
    def __init__(self, backend: str = "sqlite", clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self._clock = clock
        self._lock = threading.Lock()
        self.up = True
        self.down_since: float | None = None  # wall-clock time it went down
        self.last_error: str | None = None
        self.reason: str | None = None  # why it is down, in words fit for an unauthenticated /readyz
        self._backoff = FIRST_BACKOFF
        self._next_try = 0.0
        self._listeners: list[Callable[[], None]] = []

    def on_recovery(self, listener: Callable[[], None]) -> None:
        """Call `listener` (cheaply: it must not do IO) each time the store comes back."""
        self._listeners.append(listener)

    def may_try(self) -> bool:
        """Whether to go to the store now: always while up; once per backoff period while down."""
        if self.up:
            return True
        with self._lock:
            now = self._clock()
            if now < self._next_try:
                return False
            self._next_try = now + self._backoff  # one caller tries; the others wait for its verdict
            return True

    def failed(self, error: BaseException | str, reason: str | None = None) -> None:
        """`error` for the log; `reason` for /readyz (the state file's problem is said as it is; a
        Redis error names its address, so by default only that Redis does not answer is)."""
        with self._lock:
            was_up, self.up = self.up, False
            self.last_error = str(error)[:200]
            self.reason = reason or (str(error) if self.backend == "sqlite" else "the shared Redis does not answer")
            if was_up:
                self.down_since, self._backoff = time.time(), FIRST_BACKOFF
            else:
                self._backoff = min(self._backoff * 2, MAX_BACKOFF)
            self._next_try = self._clock() + self._backoff
        if was_up:
            log.warning("state store (%s) unavailable: %s; serving from each worker's last known state, usage and "
                        "counters buffered in memory until it answers again", self.backend, self.last_error)

    def ok(self) -> None:
        if self.up:
            return
        with self._lock:
            if self.up:
                return
            self.up, down_for = True, time.time() - (self.down_since or time.time())
            self.down_since, self.last_error, self.reason, self._backoff = None, None, None, FIRST_BACKOFF
        log.warning("state store (%s) answers again after %.1fs; writing what was buffered", self.backend, down_for)
        for listener in self._listeners:
            listener()

    def public(self) -> dict[str, object]:
        """For /readyz, which needs no key: whether, and since when — not the error, which names
        the store's address (the log line has it)."""
        return {"state": "ok" if self.up else "degraded", "state_backend": self.backend,
                **({"state_down_since": self.down_since, "state_reason": self.reason} if not self.up else {})}
