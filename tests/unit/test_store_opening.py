"""Every store opened in one place by one rule (proxy/serving/state_backend.py): memory with no
state file, the state file with one, Redis with `backend: redis` — and, while Redis is away, limits
and affinity stepping down to the state file, then memory (docs/architecture.md §8.6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.config import parse
from proxy.conversations.store import ResponseStore
from proxy.keys.redis_store import RedisKeyStore
from proxy.keys.sqlite_store import SQLiteKeyStore
from proxy.keys.store import MemoryKeyStore
from proxy.limits.store import MemoryLimitStore, SQLiteLimitStore
from proxy.ops.sqlite_usage_store import SQLiteUsageStore
from proxy.ops.usage_store import MemoryUsageStore
from proxy.pool.affinity import MemoryAffinity, SQLiteAffinity
from proxy.pool.store import MemoryStore, SQLiteStore
from proxy.serving.state_backend import KINDS, Chain, Kind, Opening, _open, open_stores
from proxy.state.health import StoreHealth
from proxy.state.sqlite import StateFile
from tests.conftest import base_config
from tests.state_files import migrated


def _chain(fallback: Any) -> list[type]:
    return [type(reach.store) for reach in fallback._stores.chain]


def test_with_no_state_file_every_store_is_this_workers_memory() -> None:
    stores = open_stores(parse(base_config("http://upstream.invalid/v1", state_path=None)))
    assert (type(stores.pool), type(stores.usage), type(stores.responses)) == \
        (MemoryStore, MemoryUsageStore, ResponseStore)
    assert stores.slots is None and stores.state_file is None and stores.health.backend == "sqlite"
    assert type(stores.keys) is MemoryKeyStore
    assert _chain(stores.limiter) == [MemoryLimitStore]
    assert _chain(stores.affinity) == [MemoryAffinity]


def test_with_a_state_file_the_stores_that_have_tables_there_use_it(tmp_path: Path) -> None:
    config = parse(base_config("http://upstream.invalid/v1", state_path=migrated(tmp_path / "state.db")))
    stores = open_stores(config)
    assert (type(stores.pool), type(stores.usage), type(stores.keys)) == (SQLiteStore, SQLiteUsageStore,
                                                                           SQLiteKeyStore)
    assert type(stores.responses) is ResponseStore  # conversations stay in the worker on one host
    assert stores.slots is None and stores.health is stores.state_file.health  # type: ignore[union-attr]
    assert _chain(stores.limiter) == [SQLiteLimitStore, MemoryLimitStore]
    assert _chain(stores.affinity) == [SQLiteAffinity, MemoryAffinity]


class _Made:
    def __init__(self) -> None:
        self.made: list[str] = []

    def kind(self, steps_down: bool = False, sqlite: bool = True, redis: bool = True) -> Kind:
        def make(where: str) -> Any:
            def maker(*_: Any) -> str:
                self.made.append(where)
                return where
            return maker
        return Kind(memory=make("memory"), sqlite=make("sqlite") if sqlite else None,
                    redis=make("redis") if redis else None, steps_down=steps_down)


def _opening(redis: bool, state_file: bool) -> Opening:
    config = parse(base_config("http://upstream.invalid/v1"))
    return Opening(config, object() if state_file else None, object() if redis else None,  # type: ignore[arg-type]
                   StoreHealth("redis" if redis else "sqlite"), "host:1")


def test_the_rule_picks_redis_then_the_state_file_then_memory_and_opens_only_what_it_picks() -> None:
    for redis, state_file, expected in [(True, True, "redis"), (False, True, "sqlite"), (False, False, "memory"),
                                        (True, False, "redis")]:
        made = _Made()
        assert _open(made.kind(), _opening(redis, state_file)) == expected
        assert made.made == [expected]
    made = _Made()
    assert _open(made.kind(redis=False), _opening(True, True)) == "sqlite"  # a kind Redis does not keep


def test_a_kind_that_steps_down_gets_every_reach_it_has() -> None:
    made = _Made()
    assert _open(made.kind(steps_down=True), _opening(True, True)) == Chain("redis", "sqlite")
    assert _open(made.kind(steps_down=True), _opening(False, False)) == Chain(None, None)


def test_the_kinds_of_store_are_one_table() -> None:
    assert set(KINDS) == {"pool", "usage", "conversations", "limits", "affinity", "slots", "budgets", "keys",
                          "requests"}
    assert {name for name, kind in KINDS.items() if kind.steps_down} == {"limits", "affinity"}


def test_runtime_keys_live_in_redis_with_backend_redis_even_beside_a_state_file(tmp_path: Path) -> None:
    """A key revoked on one host must be revoked on every host: the state file is this host's only."""
    import redis

    config = parse({**base_config("http://upstream.invalid/v1", state_path=migrated(tmp_path / "state.db")),
                    "state": {"backend": "redis", "url": "redis://127.0.0.1:1/0"}})
    client = redis.Redis.from_url("redis://127.0.0.1:1/0")  # not connected until used: nothing is sent here
    state_file = StateFile.open(migrated(tmp_path / "state.db"))
    try:
        opened = _open(KINDS["keys"], Opening(config, state_file, client, StoreHealth("redis"), "host:1"))
    finally:
        state_file.close()
    assert type(opened) is RedisKeyStore and opened.client is client and opened.state == config.state


def test_the_request_log_opens_beside_the_state_file_only_when_it_is_on(tmp_path: Path) -> None:
    from proxy.ops.request_log_store import SQLiteRequestLog

    off = parse(base_config("http://upstream.invalid/v1", state_path=str(tmp_path / "state.db")))
    on = parse(base_config("http://upstream.invalid/v1", state_path=str(tmp_path / "state.db"),
                           request_log={"enabled": True}))
    assert _open(KINDS["requests"], Opening(off, object(), None, StoreHealth("sqlite"), "h:1")) is None  # type: ignore[arg-type]
    assert not (tmp_path / "state.requests.db").exists()
    store = _open(KINDS["requests"], Opening(on, object(), None, StoreHealth("sqlite"), "h:1"))  # type: ignore[arg-type]
    assert isinstance(store, SQLiteRequestLog) and (tmp_path / "state.requests.db").exists()
