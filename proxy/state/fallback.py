"""Which store answers a call, for the stores that keep the same figures at several reaches: the
one shared across hosts (Redis) while it answers, else the host's own (the state file) while it
can be written, else the worker's memory.

Owns that choice for the client keys' limits (proxy/limits) and conversation affinity
(proxy/relay/affinity.py): a call goes to the first store of the chain that has not failed in the
last `RETRY_AFTER` seconds; a failure sends that call, and those that follow, one step down. Each
store's outage and return are logged once, in the caller's words (what holds while it is away).
The last store of the chain (memory) always answers; its errors are raised. How a store is called —
on a thread, for one that blocks — is the caller's `run`: this module is below the layers that own
threads. `after_failure(store)` tells the caller which store stood in, so it can replay onto the
first what the others took meanwhile (the limiter does). Must not know what the stores hold.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

S = TypeVar("S")
T = TypeVar("T")


class Runner(Protocol):
    def __call__(self, store: Any, fn: Callable[[], T], /) -> T: ...


def _direct(store: Any, fn: Callable[[], T]) -> T:
    return fn()


RETRY_AFTER = 5.0  # seconds a store that failed is skipped before it is tried again


@dataclass
class Reach(Generic[S]):
    """One store of a chain: what it is called in the log, and what holds while it is away."""

    store: S
    name: str  # "the Redis state store", "the state file"
    meanwhile: str  # "client key limits are enforced per host"
    down_until: float | None = None


def reaches(shared: S | None, local: S | None, memory: S, holds: str) -> list[Reach[S]]:
    """The usual chain: `shared` (Redis) if configured, `local` (the state file) if there is one,
    then `memory`. `holds` says what then holds, as "client key limits are enforced": per host while
    Redis is away, per worker while the state file is."""
    chain: list[Reach[S]] = []
    if shared is not None:
        chain.append(Reach(shared, "the Redis state store", f"{holds} per host"))
    if local is not None:
        chain.append(Reach(local, "the state file", f"{holds} per worker"))
    chain.append(Reach(memory, "memory", ""))
    return chain


class Fallback(Generic[S]):
    def __init__(self, chain: Sequence[Reach[S]], run: Runner = _direct, *, log: logging.Logger,
                 clock: Callable[[], float] = time.monotonic) -> None:
        assert chain, "a chain needs at least one store"
        self.chain = list(chain)
        self._run = run
        self._log, self._clock = log, clock

    @property
    def first(self) -> S:
        return self.chain[0].store

    def call(self, op: Callable[[S], T]) -> tuple[S, T]:
        """`op` on the first store that answers now, and that store. The last store's errors are raised."""
        *upper, last = self.chain
        for reach in upper:
            if reach.down_until is not None and self._clock() < reach.down_until:
                continue
            store = reach.store
            try:
                result = self._run(store, functools.partial(op, store))
            except Exception as exc:
                if reach.down_until is None:
                    self._log.warning("%s failed (%s: %s); %s until it answers again", reach.name,
                                      type(exc).__name__, exc, reach.meanwhile)
                reach.down_until = self._clock() + RETRY_AFTER
                continue
            if reach.down_until is not None:
                self._log.warning("%s answers again", reach.name)
                reach.down_until = None
            return store, result
        store = last.store
        return store, self._run(store, functools.partial(op, store))

    def all_up(self) -> bool:
        return all(reach.down_until is None for reach in self.chain[:-1])
