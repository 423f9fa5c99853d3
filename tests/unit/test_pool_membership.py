"""Which accounts a pool has across reloads: the file's, with the overlay of runtime additions and
removals, reconciled at each reload; the keeper adopting a reloaded config's pools and writing a
retired pool's books until its last lease is back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.config import Account, parse
from proxy.ir.response import Usage
from proxy.pool.pool import AccountPool
from proxy.pool.state import ACTIVE, COOLING, DISABLED
from proxy.pool.store import MemoryStore, SQLiteStore
from proxy.upstream.keeper import PoolKeeper
from tests.state_files import open_state_file


def upstream(accounts: dict[str, str], name: str = "u", **pool: Any) -> Any:
    config = parse({"client_keys": ["c"], "upstreams": [{
        "name": name, "protocol": "chat_completions", "base_url": "http://u/v1", "pool": pool,
        "accounts": [{"id": i, "api_key": k} for i, k in accounts.items()]}]})
    return config.upstreams[0]


FILE = {"f1": "sk-file-0001", "f2": "sk-file-0002"}


def test_a_reload_brings_back_file_accounts_deleted_at_runtime_and_keeps_runtime_additions() -> None:
    pool = AccountPool(upstream(FILE))
    pool.remove("f2")
    pool.add(Account("r1", "sk-runtime-0001"))
    assert [s.id for s in pool.states()] == ["f1", "r1"] and pool.overlay() == (["r1"], ["f2"])
    pool.pending()
    pool.reconfigure(upstream(FILE))
    assert sorted(s.id for s in pool.states()) == ["f1", "f2", "r1"] and pool.overlay() == (["r1"], [])
    records = {r.id: r for r in pool.pending()[0]}
    assert list(records) == ["f2"] and not records["f2"].removed and records["f2"].runtime is None


def test_the_file_wins_an_id_and_decides_what_goes() -> None:
    pool = AccountPool(upstream(FILE))
    pool.add(Account("r1", "sk-runtime-0001"))
    pool.cool("f1", 2_000_000_000, "exhausted: HTTP 429")
    lease = pool.lease({"r1"})
    assert lease is not None and lease.account.id == "f2"
    pool.pending()
    pool.reconfigure(upstream({"f1": "sk-file-0001", "r1": "sk-file-r1"}))  # f2 left the file; r1 entered it
    assert sorted(s.id for s in pool.states()) == ["f1", "r1"]
    assert pool.overlay() == ([], [])  # r1 is the file's now
    r1 = pool.get("r1")
    assert r1 is not None and r1.account.api_key == "sk-file-r1"
    f1 = pool.get("f1")
    assert f1 is not None and f1.status == COOLING  # an account kept keeps its state
    records = {r.id: r for r in pool.pending()[0]}
    assert set(records) == {"r1"} and records["r1"].runtime is None  # f2 is not stored as "removed"
    lease.release(usage=Usage(input_tokens=3, output_tokens=4))  # on the state it was leased from
    (delta,) = pool.pending()[1]
    assert (delta.id, delta.tokens_out) == ("f2", 4)


def test_a_changed_key_starts_afresh_other_changes_keep_the_state() -> None:
    pool = AccountPool(upstream(FILE))
    pool.disable("f1", "auth_invalid: HTTP 401")
    pool.disable("f2", "admin: maintenance")
    lease = pool.lease(set())
    assert lease is None  # both out
    pool.reconfigure(upstream({"f1": "sk-file-new1", "f2": "sk-file-0002"}, policy="balance", max_attempts=3))
    f1, f2 = pool.get("f1"), pool.get("f2")
    assert f1 is not None and f1.status == ACTIVE and f1.account.api_key == "sk-file-new1"
    assert f2 is not None and f2.status == DISABLED
    assert pool.settings.policy == "balance" and pool.settings.max_attempts == 3


def test_the_keeper_adopts_new_pools_from_the_store_and_writes_a_retired_pools_books(tmp_path: Path) -> None:
    store = SQLiteStore(open_state_file(tmp_path / "state.db"))
    earlier = AccountPool(upstream(FILE, name="later"))
    earlier.disable("f1", "admin: off")
    store.write(*earlier.pending())

    old = AccountPool(upstream(FILE, name="old"))
    keeper = PoolKeeper({}, store, None)  # type: ignore[arg-type]
    keeper.adopt({"old": old})
    lease = old.lease(set())
    assert lease is not None

    later = AccountPool(upstream(FILE, name="later"))
    keeper.adopt({"later": later})  # "old" is gone from the config, with a lease still out
    f1 = later.get("f1")
    assert f1 is not None and f1.status == DISABLED  # taken in from the store
    keeper.sync()
    assert keeper._retired == [old]  # a lease is out: its release must still reach the store
    lease.release(usage=Usage(input_tokens=1, output_tokens=2))
    keeper.sync()  # the retired pool's last delta is written, and the pool, idle now, dropped
    totals = {(r.upstream, r.id): r for r in store.counters()}
    assert totals[("old", lease.account.id)].tokens_out == 2
    assert keeper._retired == []


def test_a_restart_keeps_the_overlay() -> None:
    store = MemoryStore()
    pool = AccountPool(upstream(FILE))
    pool.remove("f2")
    store.write(*pool.pending())
    restarted = AccountPool(upstream(FILE))
    PoolKeeper({}, store, None).adopt({"u": restarted})  # type: ignore[arg-type]
    assert [s.id for s in restarted.states()] == ["f1"] and restarted.overlay() == ([], ["f2"])
