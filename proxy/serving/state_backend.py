"""Which stores hold the state workers and hosts share, by `state.backend`, opened the one way.

Owns the choice, made once per worker in `create_app`, and the opening: the `state_path` file
through one `StateFile` (proxy/state/sqlite.py: it checks the file is at this code's schema version
— gunicorn's master migrated it before forking — and is shared by every store with tables in it),
and with `backend: redis` one Redis client (proxy/state/redis_connection.py: a URL, or Sentinel)
shared by every Redis store. `sqlite` (the default) — the pool's `SQLiteStore`, usage, client key
limits and conversation affinity in the file, shared by one host's workers, the Responses store in
this worker's memory; `redis` — the pool's `RedisStore`, the cross-host `max_concurrency` ledger
(`RedisSlots`), the `RedisUsageStore`, the `SharedResponseStore`, and Redis first for limits and
affinity with the file (then memory) standing in while Redis is away (docs/architecture.md §8.6).
Builds; decides nothing about requests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from proxy.config import Config
from proxy.conversations.redis_store import SharedResponseStore
from proxy.conversations.store import ResponseStore
from proxy.limits.limiter import Limiter
from proxy.limits.store import LimitStore, SQLiteLimitStore
from proxy.ops.redis_usage_store import RedisUsageStore
from proxy.ops.sqlite_usage_store import SQLiteUsageStore
from proxy.ops.usage_store import MemoryUsageStore, UsageStore
from proxy.pool.affinity import AffinityStore, SQLiteAffinity
from proxy.pool.pool import SlotLedger
from proxy.pool.redis_slots import RedisSlots
from proxy.pool.redis_store import RedisStore
from proxy.pool.store import MemoryStore, SQLiteStore, StateStore
from proxy.relay.affinity import Affinity
from proxy.serving import master
from proxy.state.health import StoreHealth
from proxy.state.redis_connection import connect
from proxy.state.sqlite import OPEN_WAIT, StateFile


@dataclass
class Stores:
    pool: StateStore
    usage: UsageStore
    responses: ResponseStore
    health: StoreHealth  # the backend's: Redis with backend redis, else the state file's
    holder: str  # this worker, as the leader lease and the slots name it
    limiter: Limiter
    affinity: Affinity
    slots: SlotLedger | None = None
    state_file: StateFile | None = None


def open_stores(config: Config) -> Stores:
    holder = f"{os.uname().nodename}:{os.getpid()}"
    kept = config.response_store
    # How long a starting worker waits for a state file another process has locked (a worker that
    # still cannot open it exits, and the master starts another: proxy.serving.worker).
    wait = float(os.environ.get("LLM_PROXY_STATE_OPEN_WAIT", OPEN_WAIT))
    migrated_here = master.accepted() is not None  # forked by our master, which migrated the file
    state_file = StateFile.open(config.state_path, wait=wait, migrated_here=migrated_here) \
        if config.state_path else None
    local_limits: LimitStore | None = SQLiteLimitStore(state_file) if state_file else None
    local_affinity: AffinityStore | None = SQLiteAffinity(state_file) if state_file else None
    if config.state.backend == "redis":
        from proxy.limits.redis_store import RedisLimitStore  # import redis only when configured
        from proxy.pool.affinity import RedisAffinity

        health = StoreHealth("redis")
        client = connect(config.state)
        redis_usage = RedisUsageStore(config.state, health, client)
        return Stores(pool=RedisStore(config.state, health, client), usage=redis_usage,
                      responses=SharedResponseStore(config.state, kept.max_entries, kept.ttl, health, client),
                      health=health, holder=holder, slots=RedisSlots(config.state, client, health, holder),
                      limiter=Limiter.over(local_limits, RedisLimitStore(config.state, client)),
                      affinity=Affinity(local_affinity, RedisAffinity(config.state, client)),
                      state_file=state_file)
    pool: StateStore = SQLiteStore(state_file) if state_file else MemoryStore()
    usage: UsageStore = SQLiteUsageStore(state_file) if state_file else MemoryUsageStore()
    health = state_file.health if state_file else StoreHealth("sqlite")
    return Stores(pool=pool, usage=usage, responses=ResponseStore(kept.max_entries, kept.ttl), health=health,
                  holder=holder, limiter=Limiter.over(local_limits), affinity=Affinity(local_affinity),
                  state_file=state_file)
