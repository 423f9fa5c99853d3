"""Every store a worker keeps state in, opened in one place: which one — memory, the state file
(SQLite) or Redis — picked from the config by one rule, the same for every kind of store.

Owns `KINDS`, the table of the kinds of store (the pool's state, usage, conversations — the
Responses store —, client key limits, USD budgets, conversation affinity, the cross-host `max_concurrency`
ledger, runtime keys with the audit log) with how each is made in memory, in the state file and in
Redis; and `open_stores`, which opens them once per worker in `create_app` (and for `llm-proxy
state export / import`). A new kind of store (budgets, runtime keys, audit, a request log) is one
entry in `KINDS` and one field of `Stores`. The connections are opened here, once: the
`state_path` file through one `StateFile` (proxy/state/sqlite.py: it checks the file is at this
code's schema version — gunicorn's master created or migrated it before forking,
proxy/state/schema.py, the one place the schema is made), and with `backend: redis` one Redis client
(proxy/state/redis_connection.py: a URL, or Sentinel) and one `StoreHealth`, shared by every Redis
store.

The rule (`_open`), the same for each kind:

- `state.backend: sqlite` (the default, one host): the kind's state-file store when there is a
  `state_path` and the kind has one, else its memory store (this worker's alone).
- `state.backend: redis` (several hosts): its Redis store. While Redis is away, a kind whose
  figures must keep holding per call (`steps_down`: limits, affinity) steps down call by call to
  the state file, then memory (proxy/state/fallback.py, `reaches`: its consumer makes the chain,
  with its memory store last); every other kind keeps its one Redis store, which degrades itself
  behind the shared `StoreHealth` (writes kept and sent again, reads answering nothing new;
  docs/architecture.md §8.6). A kind with no Redis store falls to the state file, then memory.

Builds; decides nothing about requests.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from proxy.budgets.guard import Budgets
from proxy.budgets.store import SQLiteBudgetStore
from proxy.config import Config
from proxy.conversations.redis_store import SharedResponseStore
from proxy.conversations.store import ResponseStore
from proxy.keys.sqlite_store import SQLiteKeyStore
from proxy.keys.store import KeyStore, MemoryKeyStore
from proxy.limits.limiter import Limiter
from proxy.limits.store import SQLiteLimitStore
from proxy.ops.redis_usage_store import RedisUsageStore
from proxy.ops.request_log_store import MemoryRequestLog, RequestLogStore, SQLiteRequestLog, log_path
from proxy.ops.sqlite_usage_store import SQLiteUsageStore
from proxy.ops.usage_store import MemoryUsageStore, UsageStore
from proxy.pool.affinity import SQLiteAffinity
from proxy.pool.lease import SlotLedger
from proxy.pool.redis_slots import RedisSlots
from proxy.pool.redis_store import RedisStore
from proxy.pool.store import MemoryStore, SQLiteStore, StateStore
from proxy.relay.affinity import Affinity
from proxy.state.health import StoreHealth
from proxy.state.redis_connection import connect
from proxy.state.sqlite import OPEN_WAIT, StateFile


@dataclass(frozen=True)
class Opening:
    """What every store is opened with: the config, and the connections opened once for all."""

    config: Config
    state_file: StateFile | None  # None: no state_path
    redis: Any  # the one Redis client with backend redis, else None
    health: StoreHealth  # the backend's: Redis's with backend redis, else the state file's
    holder: str  # this worker, as the leader lease and the slots name it


@dataclass(frozen=True)
class Kind:
    """One kind of store: how it is made at each reach (None: it has no store there)."""

    memory: Callable[[Opening], Any] | None
    sqlite: Callable[[StateFile, Opening], Any] | None
    redis: Callable[[Opening], Any] | None
    steps_down: bool = False  # Redis, else the state file, else memory, call by call (proxy/state/fallback.py)


def _redis_limits(o: Opening) -> Any:
    from proxy.limits.redis_store import RedisLimitStore  # imports redis: only when configured

    return RedisLimitStore(o.config.state, o.redis)


def _redis_budgets(o: Opening) -> Any:
    from proxy.budgets.redis_store import RedisBudgetStore  # imports redis: only when configured

    return RedisBudgetStore(o.config.state, o.redis)


def _redis_affinity(o: Opening) -> Any:
    from proxy.pool.affinity import RedisAffinity  # imports redis: only when configured

    return RedisAffinity(o.config.state, o.redis)


def _redis_keys(o: Opening) -> Any:
    from proxy.keys.redis_store import RedisKeyStore  # imports redis: only when configured

    return RedisKeyStore(o.config.state, o.redis)


def _request_log(make: Callable[[Opening, float, int], Any]) -> Callable[[Opening], Any]:
    """A request log store when the config turns the log on (none is opened, no file made, otherwise)."""

    def opened(o: Opening) -> Any:
        settings = o.config.request_log
        return make(o, settings.retention_hours * 3600, settings.max_total_bytes) if settings.enabled else None

    return opened


def _redis_request_log(o: Opening, retention_s: float, max_bytes: int) -> Any:
    from proxy.ops.redis_request_log import RedisRequestLog  # imports redis: only when configured

    return RedisRequestLog(o.config.state, retention_s, max_bytes, o.redis)


def _kept(o: Opening) -> tuple[int, float]:
    return o.config.response_store.max_entries, o.config.response_store.ttl


KINDS: dict[str, Kind] = {
    "pool": Kind(memory=lambda o: MemoryStore(), sqlite=lambda f, o: SQLiteStore(f),
                 redis=lambda o: RedisStore(o.config.state, o.health, o.redis)),
    "usage": Kind(memory=lambda o: MemoryUsageStore(), sqlite=lambda f, o: SQLiteUsageStore(f),
                  redis=lambda o: RedisUsageStore(o.config.state, o.health, o.redis)),
    # Conversations: the Responses store, in this worker's memory on one host.
    "conversations": Kind(memory=lambda o: ResponseStore(*_kept(o)), sqlite=None,
                          redis=lambda o: SharedResponseStore(o.config.state, *_kept(o), o.health, o.redis)),
    # The consumer (the limiter, the affinity) puts its own memory store last in the chain.
    "limits": Kind(memory=None, sqlite=lambda f, o: SQLiteLimitStore(f), redis=_redis_limits, steps_down=True),
    # USD budgets: one store, never a stand-in (a budget held per host or per worker is none); while
    # it does not answer, budgeted requests are refused (proxy/budgets/guard.py).
    "budgets": Kind(memory=lambda o: SQLiteBudgetStore.in_memory(), sqlite=lambda f, o: SQLiteBudgetStore(f),
                    redis=_redis_budgets),
    "affinity": Kind(memory=None, sqlite=lambda f, o: SQLiteAffinity(f), redis=_redis_affinity, steps_down=True),
    # max_concurrency beyond this worker; none (this worker's own count) on one host.
    "slots": Kind(memory=None, sqlite=None, redis=lambda o: RedisSlots(o.config.state, o.redis, o.health, o.holder)),
    # Runtime keys and the audit log: one store, never a stand-in (a key revoked in Redis must not
    # live on in a worker's memory); with state_path: null, this worker's alone.
    "keys": Kind(memory=lambda o: MemoryKeyStore(), sqlite=lambda f, o: SQLiteKeyStore(f), redis=_redis_keys),
    # The request log: a file of its own beside the state file (never the state file: its bursts of
    # large bodies must not slow usage commits), Redis with TTLs, else memory; none when it is off.
    "requests": Kind(memory=_request_log(lambda o, r, m: MemoryRequestLog(r, m)),
                     sqlite=lambda f, o: _request_log(lambda o, r, m: SQLiteRequestLog(
                         log_path(str(o.config.state_path)), r, m))(o),
                     redis=_request_log(_redis_request_log)),
}


@dataclass(frozen=True)
class Chain:
    """A kind that steps down: its stores, first tried first — Redis (if configured), the state file
    (if any); its consumer adds its memory store last (proxy/state/fallback.py, `reaches`)."""

    shared: Any
    local: Any


def _open(kind: Kind, o: Opening) -> Any:
    """The rule: the store of `kind` for this config (a `Chain` for a kind that steps down)."""
    shared = kind.redis(o) if kind.redis is not None and o.redis is not None else None
    if shared is not None and not kind.steps_down:
        return shared
    local = kind.sqlite(o.state_file, o) if kind.sqlite is not None and o.state_file is not None else None
    if kind.steps_down:
        return Chain(shared, local)
    if local is not None:
        return local
    return kind.memory(o) if kind.memory is not None else None


@dataclass
class Stores:
    pool: StateStore
    usage: UsageStore
    responses: ResponseStore
    health: StoreHealth  # the backend's: Redis with backend redis, else the state file's
    holder: str  # this worker, as the leader lease and the slots name it
    limiter: Limiter
    affinity: Affinity
    budgets: Budgets
    keys: KeyStore
    requests: RequestLogStore | None = None  # None: request_log.enabled is false
    slots: SlotLedger | None = None
    state_file: StateFile | None = None


def open_stores(config: Config, migrated_here: bool = False) -> Stores:
    """Every store of `config`. `migrated_here`: this worker's master migrated the state file before
    forking it (proxy.serving.master), so a file found unmigrated was replaced under the running proxy."""
    holder = f"{os.uname().nodename}:{os.getpid()}"
    # How long a starting worker waits for a state file another process has locked (a worker that
    # still cannot open it exits, and the master starts another: proxy.serving.worker).
    wait = float(os.environ.get("LLM_PROXY_STATE_OPEN_WAIT", OPEN_WAIT))
    state_file = StateFile.open(config.state_path, wait=wait, migrated_here=migrated_here) \
        if config.state_path else None
    if config.state.backend == "redis":
        o = Opening(config, state_file, connect(config.state), StoreHealth("redis"), holder)
    else:
        health = state_file.health if state_file else StoreHealth("sqlite")
        o = Opening(config, state_file, None, health, holder)
    opened = {name: _open(kind, o) for name, kind in KINDS.items()}
    limits, affinity = opened["limits"], opened["affinity"]
    return Stores(pool=opened["pool"], usage=opened["usage"], responses=opened["conversations"], health=o.health,
                  holder=holder, slots=opened["slots"], limiter=Limiter.over(limits.local, limits.shared),
                  affinity=Affinity(affinity.local, affinity.shared), budgets=Budgets(opened["budgets"]),
                  keys=opened["keys"], requests=opened["requests"], state_file=state_file)


@contextlib.contextmanager
def one_store(config: Config, kind: str) -> Iterator[Any]:
    """The store of one `kind` for `config`, on connections of its own, closed on leaving — for a
    process that does not serve: the master (it audits the reloads it accepts) and the CLI."""
    state_file = StateFile.open(config.state_path) if config.state_path else None
    redis = connect(config.state) if config.state.backend == "redis" else None
    health = StoreHealth("redis") if redis is not None else (state_file.health if state_file else StoreHealth("sqlite"))
    try:
        yield _open(KINDS[kind], Opening(config, state_file, redis, health, f"{os.uname().nodename}:{os.getpid()}"))
    finally:
        if state_file is not None:
            state_file.close()
        if redis is not None:
            redis.close()
