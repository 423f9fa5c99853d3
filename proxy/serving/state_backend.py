"""Which stores hold the state workers and hosts share, by `state.backend`.

Owns the choice, made once per worker in `create_app`: `sqlite` (the default) — the pool's
`SQLiteStore` and the usage tables in the `state_path` file, shared by one host's workers, the
Responses store in this worker's memory; `redis` — one Redis client for the worker, shared by the
pool's `RedisStore`, the cross-host `max_concurrency` ledger (`RedisSlots`), the `RedisUsageStore`
and the `SharedResponseStore`, with one `StoreHealth` they all report to (docs/architecture.md
§8.4). Builds; decides nothing about requests.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.config import Config
from proxy.ops.redis_usage_store import RedisUsageStore
from proxy.ops.usage_store import UsageStore, open_usage_store
from proxy.pool.pool import SlotLedger
from proxy.pool.redis_slots import RedisSlots
from proxy.pool.redis_store import RedisStore
from proxy.pool.store import MemoryStore, SQLiteStore, StateStore
from proxy.protocols.responses.shared_store import SharedResponseStore
from proxy.protocols.responses.store import ResponseStore
from proxy.state.health import StoreHealth
from proxy.state.redis_connection import connect


@dataclass
class Stores:
    pool: StateStore
    usage: UsageStore
    responses: ResponseStore
    health: StoreHealth
    holder: str  # this worker, as the leader lease and the slots name it
    slots: SlotLedger | None = None
    tick_hooks: list[Callable[[], None]] = field(default_factory=list)  # for the keeper's tick


def open_stores(config: Config) -> Stores:
    holder = f"{os.uname().nodename}:{os.getpid()}"
    kept = config.response_store
    if config.state.backend == "redis":
        health = StoreHealth("redis")
        client = connect(config.state)
        usage = RedisUsageStore(config.state, health, client)
        return Stores(pool=RedisStore(config.state, health, client), usage=usage,
                      responses=SharedResponseStore(config.state, kept.max_entries, kept.ttl, health, client),
                      health=health, holder=holder, slots=RedisSlots(config.state, client, health, holder),
                      tick_hooks=[usage.retry])
    pool: StateStore = SQLiteStore(config.state_path) if config.state_path else MemoryStore()
    return Stores(pool=pool, usage=open_usage_store(config.state_path),
                  responses=ResponseStore(kept.max_entries, kept.ttl), health=StoreHealth("sqlite"), holder=holder)
