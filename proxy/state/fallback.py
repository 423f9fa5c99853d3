"""Which store answers a call: the one shared across hosts (Redis) while it answers, this host's
own (the state file, or memory) while it does not.

Owns that choice for the stores that have both — the client keys' limits (proxy/limits) and
conversation affinity (proxy/relay/affinity.py): a call goes to the shared store unless it failed
less than `RETRY_SHARED` seconds ago, and a failure sends that call, and those that follow, to the
local store. The outage and the return are each logged once, in the caller's words (what now holds
per host only). How a store is called — on a thread, for one that blocks — is the caller's `run`:
this module is below the layers that own threads. Must not know what the stores hold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

S = TypeVar("S")
T = TypeVar("T")

class Runner(Protocol):
    def __call__(self, store: Any, fn: Callable[[], T], /) -> T: ...


def _direct(store: Any, fn: Callable[[], T]) -> T:
    return fn()


RETRY_SHARED = 5.0  # seconds on the host's own store after the shared one failed, before it is tried again


class SharedFirst(Generic[S]):
    def __init__(self, local: S, shared: S | None, run: Runner = _direct, *,
                 log: logging.Logger, meanwhile: str, clock: Callable[[], float] = time.monotonic) -> None:
        """`meanwhile`: what holds while the shared store is away ("client key limits are enforced
        per host"), for the log line that says it failed."""
        self.local, self.shared = local, shared
        self._run = run
        self._log, self._meanwhile, self._clock = log, meanwhile, clock
        self._down_until: float | None = None  # set while the shared store is away: when to try it again

    def call(self, op: Callable[[S], T]) -> tuple[S, T]:
        """`op` on the store that answers now, and that store. The local store's errors are raised."""
        shared = self.shared
        if shared is not None and (self._down_until is None or self._clock() >= self._down_until):
            try:
                result = self._run(shared, lambda: op(shared))
            except Exception as exc:
                if self._down_until is None:
                    self._log.warning("the Redis state store failed (%s: %s); %s until it answers again",
                                      type(exc).__name__, exc, self._meanwhile)
                self._down_until = self._clock() + RETRY_SHARED
            else:
                if self._down_until is not None:
                    self._log.warning("the Redis state store answers again; shared across hosts again")
                    self._down_until = None
                return shared, result
        local = self.local
        return local, self._run(local, lambda: op(local))
