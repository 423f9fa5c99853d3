"""Conversation affinity in the relay, with the fake transport of the retry-loop tests: a
conversation's turns stay on the account that served the first one (where the policy would rotate),
move when that account cools and stay where they moved; what names a conversation in each protocol
(Claude Code's session header and metadata.user_id, prompt_cache_key, user, a configured header);
`pool.affinity: off`; the three stores."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from proxy.config import ConfigError, parse
from proxy.config.state import StateConfig
from proxy.pool import affinity as affinity_store
from proxy.pool.affinity import AffinityStore, MemoryAffinity, SQLiteAffinity
from proxy.protocols import registry
from proxy.protocols.exchange import Exchange
from proxy.relay.affinity import Affinity
from tests.state_files import open_state_file
from tests.unit.test_relay_retry_loop import CHAT_ANSWER, answer, relay_for, upstream


def turn(body: dict[str, Any] | None = None, protocol: str = "chat_completions",
         headers: dict[str, str] | None = None) -> Exchange:
    full: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Hello"}], **(body or {})}
    if protocol == "messages":
        full["max_tokens"] = 100
    return Exchange(protocol=protocol, body=full, model="m", stream=False, request_id="req_test",
                    request_headers=headers or {})


def test_a_conversation_stays_on_its_account_and_moves_only_when_it_cools() -> None:
    relay, transport, clock = relay_for(upstream("a", accounts=3))  # round_robin: would rotate every turn
    relay.affinity = Affinity(MemoryAffinity(clock=lambda: clock.now))
    for account in ("a1", "a2", "a3"):
        transport.on(account, *[answer(200, CHAT_ANSWER)] * 6)
    for _ in range(3):
        relay.handle(turn({"user": "alice"}))
    relay.handle(turn({"user": "bob"}))  # another conversation: the policy's choice
    assert transport.accounts == ["a1", "a1", "a1", "a2"]
    relay.pools["a"].cool("a1", clock.now + 30, "exhausted: HTTP 429")
    relay.handle(turn({"user": "alice"}))
    relay.handle(turn({"user": "alice"}))
    moved = transport.accounts[4]
    assert moved != "a1" and transport.accounts[5] == moved  # moved once, and stays where it moved
    relay.pools["a"].enable("a1")
    relay.handle(turn({"user": "alice"}))
    assert transport.accounts[6] == moved  # its cache is there now


def test_affinity_off_leaves_the_policy_alone() -> None:
    relay, transport, clock = relay_for(upstream("a", accounts=2, pool={"affinity": "off"}))
    relay.affinity = Affinity(MemoryAffinity(clock=lambda: clock.now))
    for account in ("a1", "a2"):
        transport.on(account, *[answer(200, CHAT_ANSWER)] * 2)
    for _ in range(4):
        relay.handle(turn({"user": "alice"}))
    assert transport.accounts == ["a1", "a2", "a1", "a2"]


def key(protocol: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> str | None:
    return registry.get(protocol).client.affinity_key(body, headers or {})


def test_what_names_a_conversation_in_each_protocol() -> None:
    user_id = '{"device_id":"d1","account_uuid":"","session_id":"s-42"}'  # Claude Code 2.1's metadata.user_id
    assert key("messages", {"metadata": {"user_id": user_id}}, {"x-claude-code-session-id": "s-42"}) == "session:s-42"
    assert key("messages", {"metadata": {"user_id": user_id}}) == f"user_id:{user_id}"
    assert key("messages", {}) is None
    assert key("responses", {"prompt_cache_key": "conv-1"}) == "prompt_cache_key:conv-1"
    assert key("responses", {"previous_response_id": "resp_1"}) is None  # followed through the response store
    assert key("chat_completions", {"prompt_cache_key": "p", "user": "u"}) == "prompt_cache_key:p"
    assert key("chat_completions", {"user": "u"}) == "user:u"
    relay, _, _ = relay_for(upstream("a", pool={"affinity_header": "X-Session-Id"}))
    affinity = Affinity(MemoryAffinity())
    up = relay.config.upstreams[0]
    assert affinity.conversation(turn({"user": "u"}, headers={"x-session-id": "abc"}), up) == "header:abc"
    assert affinity.conversation(turn({"user": "u"}), up) == "user:u"


def test_the_pool_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"upstreams\[0\]\.pool\.affinity: must be on or off"):
        relay_for(upstream("a", pool={"affinity": "sometimes"}))
    with pytest.raises(ConfigError, match=r"upstreams\[0\]\.pool\.affinity_header: must be an HTTP header name"):
        relay_for(upstream("a", pool={"affinity_header": "X Session"}))


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> AffinityStore:
    if request.param == "memory":
        return MemoryAffinity()
    if request.param == "sqlite":
        return SQLiteAffinity(open_state_file(tmp_path / "state.db"))
    from proxy.pool.affinity import RedisAffinity

    url = request.getfixturevalue("redis_url")
    return RedisAffinity(StateConfig(backend="redis", url=url, prefix=f"a{uuid.uuid4().hex[:6]}:"))


def test_every_store_remembers_per_upstream(store: AffinityStore) -> None:
    assert store.get("u", "user:alice", 60) is None
    store.put("u", "user:alice", "acct-2", 60)
    store.put("v", "user:alice", "acct-9", 60)
    assert (store.get("u", "user:alice", 60), store.get("v", "user:alice", 60)) == ("acct-2", "acct-9")
    store.put("u", "user:alice", "acct-3", 60)
    assert store.get("u", "user:alice", 60) == "acct-3"
    # What a turn reads first, on the request's greenlet: the same answers.
    assert (store.get_at_once("u", "user:alice", 60), store.get_at_once("v", "user:alice", 60),
            store.get_at_once("u", "user:bob", 60)) == ("acct-3", "acct-9", None)


def test_memory_and_sqlite_entries_expire(tmp_path: Path) -> None:
    now = [1000.0]
    for store in (MemoryAffinity(clock=lambda: now[0]), SQLiteAffinity(open_state_file(tmp_path / "s.db"), clock=lambda: now[0])):
        store.put("u", "c", "a1", 60)
        now[0] += 50
        assert store.get("u", "c", 60) == "a1"  # read at 50 s: extended to 60 s from now
        now[0] += 50
        assert store.get("u", "c", 60) == "a1"
        now[0] += 61
        assert store.get("u", "c", 60) is None
        now[0] = 1000.0


def test_the_sqlite_store_keeps_its_connections_and_drops_one_an_error_went_through(tmp_path: Path) -> None:
    store = SQLiteAffinity(open_state_file(tmp_path / "s.db"))
    store.put("u", "c", "a1", 60)
    kept = store._idle[:]
    assert len(kept) == 1
    for _ in range(5):
        assert store.get("u", "c", 60) == "a1"
    assert store._idle == kept  # the same connection, every operation

    # Operations running at once each take a connection; the idle list keeps a bounded number back.
    sessions = [store._session() for _ in range(affinity_store.IDLE_CONNECTIONS + 3)]
    held = [session.__enter__() for session in sessions]
    assert len(set(map(id, held))) == len(held) and store._idle == []
    for session in sessions:
        session.__exit__(None, None, None)
    assert len(store._idle) == affinity_store.IDLE_CONNECTIONS

    # Another process writes: a kept connection reads what it committed.
    other = SQLiteAffinity(open_state_file(tmp_path / "s.db"))
    other.put("u", "c", "a2", 60)
    assert store.get("u", "c", 60) == "a2"

    # An operation that fails closes its connection instead of keeping it.
    store._idle[:] = store._idle[:1]
    failing = store._idle[0]
    with pytest.raises(sqlite3.OperationalError), store._session() as db:
        db.execute("SELECT nothing FROM no_such_table")
    assert failing not in store._idle
    with pytest.raises(sqlite3.ProgrammingError):
        failing.execute("SELECT 1")  # closed
    assert store.get("u", "c", 60) == "a2"  # a new connection serves the next one


def test_the_sqlite_store_answers_at_once_unless_the_entry_is_due_for_its_extension(tmp_path: Path) -> None:
    now = [1000.0]
    store = SQLiteAffinity(open_state_file(tmp_path / "s.db"), clock=lambda: now[0])
    assert store.get_at_once("u", "c", 60) is None  # nothing remembered: no need for the thread either
    store.put("u", "c", "a1", 60)
    assert store.get_at_once("u", "c", 60) == "a1"
    now[0] += 31  # past half the TTL: the entry's extension is a write, made on a thread by `get`
    with pytest.raises(affinity_store.NotNow):
        store.get_at_once("u", "c", 60)

    # A failure that is not a lock (here the table gone for a moment) is raised, and its connection
    # is not kept: the next lookup opens a new one.
    broken = store._at_once
    other = open_state_file(tmp_path / "s.db").connect()
    other.execute("ALTER TABLE conversation_affinity RENAME TO gone")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        store.get_at_once("u", "c", 60)
    assert store._at_once is None and broken is not None
    with pytest.raises(sqlite3.ProgrammingError):
        broken.execute("SELECT 1")  # closed
    other.execute("ALTER TABLE gone RENAME TO conversation_affinity")
    now[0] -= 31
    assert store.get_at_once("u", "c", 60) == "a1"

    # Through the relay's side: the turn still finds its account, and the entry is extended.
    relay_side = Affinity(local=store)
    ex = turn({"user": "alice"})
    up = registry.resolve(parse({"client_keys": ["sk-client"], "upstreams": [upstream("u")]})).upstreams[0]
    conversation = relay_side.conversation(ex, up)
    assert conversation is not None
    store.put("u", conversation, "a1", up.pool.affinity_ttl)
    now[0] += up.pool.affinity_ttl * 0.6
    assert relay_side.preferred(ex, up, conversation) == "a1"  # due: on the thread, which extends it
    now[0] += up.pool.affinity_ttl * 0.3
    # Extended by that turn: answered at once (unextended, it would be due again, NotNow).
    assert store.get_at_once("u", conversation, up.pool.affinity_ttl) == "a1"
