"""The runtime key stores — in memory, the state file and a real Redis (its Lua script) — held to the
same answers: a change and its audit entry read back whole; a name already taken applies nothing
and records nothing; the version goes up by one per change and not for a last-used time; idempotency
records answer until they expire; the audit log filtered by time, actor and target, newest first,
limited, and purged; what was written is there for a store opened afresh (a restart)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from proxy.config.state import StateConfig
from proxy.keys import redis_store as redis_key_module
from proxy.keys.model import (
    AuditEntry,
    Change,
    Idempotent,
    NameTaken,
    Overlay,
    RuntimeAdmin,
    RuntimeGroup,
    RuntimeKey,
    Secret,
    Snapshot,
)
from proxy.keys.sqlite_store import SQLiteKeyStore
from proxy.keys.store import KeyStore, MemoryKeyStore
from proxy.state.redis_connection import connect
from tests.state_files import open_state_file

# Redis forgets an idempotency record at its `expires` on its own clock: the test's "now" is a day
# ahead of the real one, so a record the test keeps for a minute is still there however long the
# suite ran before this module's tests
NOW = time.time() + 86400

Opener = Callable[[], KeyStore]


@pytest.fixture(params=["memory", "sqlite", "redis"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens the store of the parameter's kind; a second call opens another on the same data (a
    restart, or another worker), except in memory, where the data is the store's own."""
    closing: list[Callable[[], None]] = []
    if request.param == "memory":
        memory = MemoryKeyStore()
        yield lambda: memory
    elif request.param == "sqlite":
        path = tmp_path / "state.db"

        def sqlite_store() -> KeyStore:
            state_file = open_state_file(path)
            closing.append(state_file.close)
            return SQLiteKeyStore(state_file)

        yield sqlite_store
    else:
        state = StateConfig(backend="redis", url=request.getfixturevalue("redis_url"),
                            prefix=f"t{uuid.uuid4().hex[:6]}:")

        def redis_store() -> KeyStore:
            client = connect(state)
            closing.append(client.close)
            return redis_key_module.RedisKeyStore(state, client)

        yield redis_store
    for close in closing:
        close()


@pytest.fixture
def store(opener: Opener) -> KeyStore:
    return opener()


def runtime_key(name: str, **changes: Any) -> RuntimeKey:
    plain = RuntimeKey(name=name, secrets=(Secret("d-" + name, "sk-…" + name[-4:]),), created_at=NOW, updated_at=NOW)
    return replace(plain, **changes)


def entry(at: float = NOW, actor: str = "ops", action: str = "key.create", target: str = "key:x",
          before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> AuditEntry:
    return AuditEntry(at=at, actor=actor, action=action, target=target, before=before,
                      after=after if after is not None else {"name": target}, request_id="req_1", client="203.0.113.7")


FULL_KEY = runtime_key(
    "team-a", secrets=(Secret("aa" * 32, "sk-…a1b2"), Secret("bb" * 32, "sk-…c3d4", until=NOW + 60.5)),
    models=("gpt-4o*", "claude-*"), limits={"requests_per_minute": 60, "tokens_per_day": 100000},
    budget={"usd_per_day": 5.25}, groups=("eng", "all"), metadata={"owner": "ana", "tags": ["ci", 1, None]},
    disabled=True, expires_at=NOW + 86400.25)
GROUP = RuntimeGroup("eng", ("team-a", "alice"), {"usd_per_month": 100}, NOW, NOW + 1)
ADMIN = RuntimeAdmin("ops-viewer", Secret("cc" * 32, "sk-…e5f6"), "viewer", NOW)


def test_a_change_reads_back_whole_and_raises_the_version_by_one(opener: Opener) -> None:
    store = opener()
    assert store.version() == 0
    assert store.snapshot() == Snapshot(version=0)
    first = Change(put_keys=(FULL_KEY, runtime_key("plain")), new_keys=("team-a", "plain"), put_groups=(GROUP,),
                   new_groups=("eng",), put_admins=(ADMIN,), new_admins=("ops-viewer",),
                   put_overlays=(Overlay("alice", True),), taken=("alice", "root"))
    assert store.commit(first, entry(target="key:team-a")) == 1
    expected = Snapshot(version=1, keys={"team-a": FULL_KEY, "plain": runtime_key("plain")}, groups={"eng": GROUP},
                        admins={"ops-viewer": ADMIN}, overlays={"alice": Overlay("alice", True)})
    assert store.snapshot() == expected
    assert opener().snapshot() == expected  # another worker, or after a restart

    # a later change: a key deleted, one replaced, a group deleted, an overlay turned back
    changed = runtime_key("plain", updated_at=NOW + 5, disabled=True)
    second = Change(put_keys=(changed,), delete_keys=("team-a",), delete_groups=("eng",), delete_admins=("ops-viewer",),
                    put_overlays=(Overlay("alice", False),))
    assert store.commit(second, entry(action="key.update")) == 2
    assert store.version() == 2
    assert store.snapshot() == Snapshot(version=2, keys={"plain": changed},
                                        overlays={"alice": Overlay("alice", False)})


def test_a_name_deleted_and_put_in_one_change_is_put(store: KeyStore) -> None:
    store.commit(Change(put_keys=(runtime_key("k1"),), new_keys=("k1",)), entry())
    replaced = runtime_key("k1", metadata={"again": True})
    store.commit(Change(put_keys=(replaced,), delete_keys=("k1",)), entry())
    assert store.snapshot().keys == {"k1": replaced}


@pytest.mark.parametrize("clash", [
    Change(put_keys=(runtime_key("eng"),), new_keys=("eng",)),  # a runtime group's name
    Change(put_groups=(RuntimeGroup("ops-viewer", (), None, NOW, NOW),), new_groups=("ops-viewer",)),  # an admin's
    Change(put_admins=(RuntimeAdmin("team-a", Secret("d", "h"), "admin", NOW),), new_admins=("team-a",)),  # a key's
    Change(put_keys=(runtime_key("from-file"),), new_keys=("from-file",), taken=("from-file",)),  # the config's
], ids=["key-as-group", "group-as-admin", "admin-as-key", "config-name"])
def test_a_name_taken_applies_nothing_and_records_nothing(store: KeyStore, clash: Change) -> None:
    store.commit(Change(put_keys=(FULL_KEY,), new_keys=("team-a",), put_groups=(GROUP,), new_groups=("eng",),
                        put_admins=(ADMIN,), new_admins=("ops-viewer",)), entry(at=NOW - 10))
    before = store.snapshot()
    # the whole change refused, though its other parts (a new key, an overlay) were free
    whole = Change(put_keys=(*clash.put_keys, runtime_key("free")), new_keys=(*clash.new_keys, "free"),
                   put_groups=clash.put_groups, new_groups=clash.new_groups, put_admins=clash.put_admins,
                   new_admins=clash.new_admins, delete_keys=("team-a",), put_overlays=(Overlay("alice", True),),
                   taken=clash.taken)
    record = Idempotent("ops", "idem-1", "fp", 201, b"sealed", NOW + 3600)
    taken_name = (*clash.new_keys, *clash.new_groups, *clash.new_admins)[0]
    with pytest.raises(NameTaken) as raised:
        store.commit(whole, entry(target="key:free"), record)
    assert raised.value.name == taken_name
    assert store.snapshot() == before
    assert store.version() == 1
    assert [e.target for e in store.audit()] == ["key:x"]
    assert store.idempotent("ops", "idem-1", NOW) is None


def test_idempotency_records_answer_until_they_expire(store: KeyStore) -> None:
    record = Idempotent("ops", "retry-1", "f" * 64, 201, b"\x00sealed\xff" * 10, NOW + 3600)
    store.commit(Change(put_keys=(runtime_key("k1"),), new_keys=("k1",)), entry(), record)
    assert store.idempotent("ops", "retry-1", NOW) == record
    assert store.idempotent("ops", "retry-1", NOW + 3599.9) == record
    assert store.idempotent("ops", "retry-1", NOW + 3600) is None  # expired
    assert store.idempotent("ci", "retry-1", NOW) is None  # another actor's key is another record
    assert store.idempotent("ops", "retry-2", NOW) is None
    # ':' in an actor or a key does not make two records one
    odd = Idempotent("a:b", "c", "fp", 200, b"x", NOW + 60)
    store.commit(Change(), entry(), odd)
    assert store.idempotent("a", "b:c", NOW) is None
    assert store.idempotent("a:b", "c", NOW) == odd
    store.purge(before=0, now=NOW + 3600)  # forgotten: even asked as of earlier, it is gone
    assert store.idempotent("ops", "retry-1", NOW) is None
    assert store.idempotent("a:b", "c", NOW) is None


def test_touch_keeps_the_later_time_and_leaves_the_version(opener: Opener) -> None:
    store = opener()
    store.commit(Change(put_keys=(runtime_key("k1"),), new_keys=("k1",)), entry())
    store.touch({"k1": NOW + 10.5, "alice": NOW + 3})  # alice: a key from the config file
    store.touch({"k1": NOW + 2, "alice": NOW + 7.25})
    store.touch({})
    assert store.snapshot().last_used == {"k1": NOW + 10.5, "alice": NOW + 7.25}
    assert store.version() == 1
    assert opener().snapshot().last_used == {"k1": NOW + 10.5, "alice": NOW + 7.25}


def audit_log(store: KeyStore) -> list[AuditEntry]:
    """Seven entries: two actors, three targets; the fifth written with an earlier time (another
    host's clock), the last two at one instant."""
    entries = [entry(NOW + 1, "ops", "key.create", "key:a", after={"name": "a", "models": None}),
               entry(NOW + 2, "ops", "key.update", "key:a", before={"name": "a"}, after={"name": "a", "n": 2}),
               entry(NOW + 3, "cli", "key.create", "key:b"),
               entry(NOW + 5, "ops", "group.create", "group:eng"),
               # the CLI's: no request id, no address; nothing after a revocation
               AuditEntry(NOW + 4, "cli", "key.revoke", "key:b", before={"name": "b"}, after=None),
               entry(NOW + 6, "ops", "key.rotate", "key:a"),
               entry(NOW + 6, "cli", "key.disable", "key:a")]
    for e in entries:
        store.commit(Change(), e)
    return entries


def test_the_audit_log_is_filtered_newest_first_and_limited(store: KeyStore) -> None:
    e1, e2, e3, e4, e5, e6, e7 = audit_log(store)
    assert store.audit() == [e7, e6, e4, e5, e3, e2, e1]  # by time; of one instant, the later written first
    assert store.audit(limit=3) == [e7, e6, e4]
    assert store.audit(since=NOW + 3) == [e7, e6, e4, e5, e3]  # since: inclusive
    assert store.audit(until=NOW + 3) == [e2, e1]  # until: exclusive
    assert store.audit(since=NOW + 2, until=NOW + 6) == [e4, e5, e3, e2]
    assert store.audit(actor="cli") == [e7, e5, e3]
    assert store.audit(target="key:a") == [e7, e6, e2, e1]
    assert store.audit(actor="ops", target="key:a", limit=2) == [e6, e2]
    assert store.audit(actor="ops", target="key:a", since=NOW + 1.5, until=NOW + 6) == [e2]
    assert store.audit(actor="nobody") == []


def test_filtering_reads_past_one_page(store: KeyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_key_module, "_PAGE", 2)  # Redis reads the log by pages while it filters
    e1, e2, _, _, e5, e6, e7 = audit_log(store)
    assert store.audit(target="key:a") == [e7, e6, e2, e1]
    assert store.audit(actor="cli", limit=2) == [e7, e5]


def test_purge_drops_the_entries_before_a_time(store: KeyStore) -> None:
    _, _, _, e4, e5, e6, e7 = audit_log(store)
    assert store.purge(before=NOW + 4, now=NOW) == 3  # e1, e2, e3; e5 (NOW + 4) stays
    assert store.audit() == [e7, e6, e4, e5]
    assert store.purge(before=NOW + 4, now=NOW) == 0
    assert store.version() == 7  # purging is not a change workers rebuild for


def test_redis_says_each_new_version_on_its_channel(redis_url: str) -> None:
    state = StateConfig(backend="redis", url=redis_url, prefix=f"t{uuid.uuid4().hex[:6]}:")
    store = redis_key_module.RedisKeyStore(state, connect(state))
    listener = connect(state).pubsub()
    listener.subscribe(store.channel)
    confirmed = listener.get_message(timeout=5)  # subscribed before the first commit: nothing missed
    assert confirmed is not None and confirmed["type"] == "subscribe"
    store.commit(Change(put_keys=(runtime_key("k1"),), new_keys=("k1",)), entry())
    store.commit(Change(), entry())
    got = [listener.get_message(timeout=5) for _ in range(2)]
    channel = (state.prefix + "keys:changed").encode()
    assert [(m["type"], m["channel"], m["data"]) for m in got if m] == [("message", channel, b"1"),
                                                                        ("message", channel, b"2")]
    listener.close()
    store.client.close()


def test_of_workers_creating_one_name_at_once_exactly_one_succeeds(opener: Opener) -> None:
    """Each worker its own store on the same data, racing: one commit wins the name, the others are
    told it is taken; names of their own all land, each commit one version."""
    stores = [opener() for _ in range(8)]
    start = threading.Barrier(len(stores))
    outcomes: list[str] = []

    def create(store: KeyStore, i: int) -> None:
        start.wait()
        try:
            store.commit(Change(put_keys=(runtime_key("shared", metadata={"by": i}),), new_keys=("shared",)), entry())
            outcomes.append("made")
        except NameTaken:
            outcomes.append("taken")
        store.commit(Change(put_keys=(runtime_key(f"own-{i}"),), new_keys=(f"own-{i}",)), entry())

    threads = [threading.Thread(target=create, args=(store, i)) for i, store in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["made"] + ["taken"] * 7
    snapshot = opener().snapshot()
    assert snapshot.version == 9 and len(opener().audit()) == 9
    assert set(snapshot.keys) == {"shared", *(f"own-{i}" for i in range(8))}
