"""The Redis-backed stores against a real Redis (tests/redis_server.py): the pool's states, counters
and overlay, the leader lease, the cross-host `max_concurrency` slots, usage and the Responses
store — each shared by two store objects standing for two hosts — and what each does while Redis
is away and after it returns."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from proxy.config.state import SentinelConfig, StateConfig
from proxy.conversations.redis_store import SharedResponseStore
from proxy.conversations.store import Origin
from proxy.ops.redis_usage_store import _ADD, RedisUsageStore
from proxy.ops.usage_store import RecentEntry, UsageQuery, UsageRow
from proxy.pool.redis_slots import RedisSlots
from proxy.pool.redis_store import RedisStore
from proxy.pool.store import AccountRecord, CounterDelta, ProxyRecord
from proxy.state.health import StoreHealth
from proxy.state.redis_connection import key
from tests.redis_server import RedisServer


def state(url: str) -> StateConfig:
    return StateConfig(backend="redis", url=url, prefix="t:")


def row(minute: int, account: str, requests: int = 1, tokens: int = 10) -> UsageRow:
    return UsageRow(minute, "team", "chat_completions", "m", "m", "main", account, False, "ok", 200,
                    requests=requests, input_tokens=tokens)


def entry(request_id: str) -> RecentEntry:
    return RecentEntry(request_id, 1.0, "team", "chat_completions", "m", "m", "main", "a", False, 200, "ok", 1,
                       5, 9, 1, 2)


def test_states_overlay_and_counters_agree_between_two_hosts(redis_url: str) -> None:
    a, b = RedisStore(state(redis_url)), RedisStore(state(redis_url))
    b.changes_since(0)  # b's first read is a full one; what follows is incremental
    a.write([AccountRecord("main", "acct:1", status="disabled", reason="admin: revoked", since=5.0),
             AccountRecord("main", "added", runtime={"id": "added", "api_key": "sk-x"})],
            [CounterDelta("main", "acct:1", requests=2, failures={"auth_invalid": 1}, tokens_in=7, last_used=9.5)],
            [ProxyRecord("main", "p1", status="cooling", until=99.0, failures=2)])
    b.write([], [CounterDelta("main", "acct:1", requests=3, tokens_out=4, last_used=8.0)])
    records, version = b.changes_since(0)
    by_id = {r.id: r for r in records}
    assert (by_id["acct:1"].status, by_id["acct:1"].reason, by_id["acct:1"].since) == ("disabled", "admin: revoked", 5.0)
    assert by_id["added"].runtime == {"id": "added", "api_key": "sk-x"}
    totals = {r.id: r for r in a.counters()}["acct:1"]
    assert (totals.requests, totals.tokens_in, totals.tokens_out, totals.failures, totals.last_used) == (
        5, 7, 4, {"auth_invalid": 1}, 9.5)
    assert b.changes_since(version) == ([], version)
    proxies, _ = b.proxy_changes_since(0)
    assert [(p.id, p.status, p.until, p.failures) for p in proxies] == [("p1", "cooling", 99.0, 2)]


def test_one_leader_across_hosts(redis_url: str) -> None:
    a, b = RedisStore(state(redis_url)), RedisStore(state(redis_url))
    assert a.lead("host-a", 5.0) and a.lead("host-a", 5.0)
    assert not b.lead("host-b", 5.0)
    a.client.delete("t:leader")  # the lease ran out (its holder died)
    assert b.lead("host-b", 5.0) and not a.lead("host-a", 5.0)


def test_slots_hold_max_concurrency_across_hosts_and_free_on_release(redis_url: str) -> None:
    health = StoreHealth("redis")
    one, two = (RedisSlots(state(redis_url), RedisStore(state(redis_url)).client, health, h) for h in ("a", "b"))
    first, second = one.acquire("main", "acct", 2), two.acquire("main", "acct", 2)
    assert first and second
    assert one.acquire("main", "acct", 2) is None and two.acquire("main", "acct", 2) is None
    one.renew()
    two.release(second)
    assert one.acquire("main", "acct", 2) is not None


def test_usage_is_summed_across_hosts_and_queried_per_minute(redis_url: str) -> None:
    a, b = RedisUsageStore(state(redis_url)), RedisUsageStore(state(redis_url))
    a.add([row(60, "x"), row(60, "x", tokens=5)], [entry("r1")])
    b.add([row(60, "x"), row(120, "y", requests=2)], [entry("r2")])
    answer = b.query(UsageQuery(0, 180, group_by=("account",), bucket="minute"))
    assert [(r["time"], r["account"], r["requests"], r["input_tokens"]) for r in answer.rows] == [
        (60, "x", 3, 25), (120, "y", 2, 10)]
    assert answer.totals["requests"] == 5
    assert [e.request_id for e in a.recent(10)] == ["r2", "r1"]
    a.add([], [], purge_before=120)
    assert b.query(UsageQuery(0, 180)).totals["requests"] == 2


def test_costs_are_summed_across_hosts_by_price_version_and_older_rows_read_back_without_one(
        redis_url: str) -> None:
    a, b = RedisUsageStore(state(redis_url)), RedisUsageStore(state(redis_url))
    priced = dataclasses.replace(row(60, "x"), price_version="config", cost_micros=11_340, cache_saved_micros=7)
    unknown = dataclasses.replace(row(60, "x"), cost_unknown_requests=1)
    a.add([priced, unknown], [dataclasses.replace(entry("r1"), cost_micros=11_340)])
    b.add([priced], [])
    # A field written before the price version was a dimension: nine dimensions.
    old = json.dumps(["team", "chat_completions", "m", "m", "main", "x", False, "ok", 200], separators=(",", ":"))
    b.client.hincrby(key(b.state, "usage", "60"), f"{old}|requests", 4)
    rows = b.query(UsageQuery(0, 120, group_by=("price_version",))).rows
    assert [(r["price_version"], r["requests"], r["cost_micros"], r["cost_unknown_requests"],
             r["cache_saved_micros"]) for r in rows] == [("", 5, 0, 1, 0), ("config", 2, 22_680, 0, 14)]
    assert [e.cost_micros for e in b.recent(1)] == [11_340]


def test_usage_by_endpoint_and_served_model_and_older_fields_read_back_with_their_defaults(
        redis_url: str) -> None:
    """A field's dimensions are a JSON array in DIMENSIONS order; one written before the endpoint and
    the served model were dimensions (ten values, or nine from before the price version) reads back
    with its client protocol as endpoint and its model as served model — and sums with the new
    fields of the same figures."""
    a, b = RedisUsageStore(state(redis_url)), RedisUsageStore(state(redis_url))
    asked = dataclasses.replace(row(60, "x"), endpoint="chat_completions", served_model="m")
    fell_back = dataclasses.replace(row(60, "x"), endpoint="chat_completions", served_model="m-small")
    embedded = dataclasses.replace(row(60, "x", tokens=3), endpoint="embeddings", served_model="m")
    a.add([asked, fell_back], [])
    b.add([embedded, asked], [])
    fields = b.client.hkeys(key(b.state, "usage", "60"))
    assert json.loads(fields[0].rpartition(b"|")[0])[-2:] in (["chat_completions", "m"],
                                                              ["chat_completions", "m-small"], ["embeddings", "m"])
    ten = json.dumps(["team", "chat_completions", "m", "m", "main", "x", False, "ok", 200, ""], separators=(",", ":"))
    nine = json.dumps(["team", "messages", "m", "m", "main", "x", False, "ok", 200], separators=(",", ":"))
    b.client.hincrby(key(b.state, "usage", "60"), f"{ten}|requests", 4)
    b.client.hincrby(key(b.state, "usage", "60"), f"{ten}|input_tokens", 40)
    b.client.hincrby(key(b.state, "usage", "60"), f"{nine}|requests", 1)
    rows = a.query(UsageQuery(0, 120, group_by=("endpoint", "served_model"))).rows
    assert [(r["endpoint"], r["served_model"], r["requests"], r["input_tokens"]) for r in rows] == [
        ("chat_completions", "m", 6, 60), ("chat_completions", "m-small", 1, 10), ("embeddings", "m", 1, 3),
        ("messages", "m", 1, 0)]
    by_everything = a.query(UsageQuery(0, 120, group_by=("client_protocol", "endpoint", "price_version"))).rows
    assert [(r["client_protocol"], r["endpoint"], r["price_version"], r["requests"]) for r in by_everything] == [
        ("chat_completions", "chat_completions", "", 7), ("chat_completions", "embeddings", "", 1),
        ("messages", "messages", "", 1)]


def test_recent_entries_keep_the_endpoint_and_served_model_and_older_ones_read_back_without(
        redis_url: str) -> None:
    from proxy.ops.recent import entry_json

    store = RedisUsageStore(state(redis_url))
    old = dataclasses.asdict(entry("old"))
    del old["endpoint"], old["served_model"]
    store.client.lpush(key(store.state, "recent"), json.dumps(old))
    store.add([], [dataclasses.replace(entry("new"), endpoint="embeddings", served_model="m-small")])
    new, before = store.recent(10)
    assert (new.endpoint, new.served_model, before.endpoint, before.served_model) == (
        "embeddings", "m-small", None, None)
    assert entry_json(before)["endpoint"] == "chat_completions"  # its protocol's


def test_recent_entries_keep_the_client_address_and_older_ones_read_back_without(redis_url: str) -> None:
    """Entries are JSON: one written before `client_address` existed lacks it and reads back None."""
    store = RedisUsageStore(state(redis_url))
    old = dataclasses.asdict(entry("old"))
    del old["client_address"]
    store.client.lpush(key(store.state, "recent"), json.dumps(old))
    store.add([], [dataclasses.replace(entry("new"), client_address="203.0.113.7")])
    assert [(e.request_id, e.client_address) for e in store.recent(10)] == [("new", "203.0.113.7"), ("old", None)]


def test_responses_issued_on_one_host_resolve_on_another(redis_url: str) -> None:
    a, b = SharedResponseStore(state(redis_url), ttl=60), SharedResponseStore(state(redis_url), ttl=60)
    a.put({"id": "resp_1", "output": [{"id": "msg_1", "type": "message"}]}, [{"id": "in_1", "role": "user"}],
          None, Origin("main", "acct", kept=False))
    b.put({"id": "resp_2", "output": []}, [{"role": "user"}], "resp_1")
    assert [i.get("id") for i in a.conversation("resp_2") or []] == ["in_1", "msg_1", None]
    found = b.get("resp_1")
    assert found is not None and found.origin == Origin("main", "acct", kept=False)
    assert b.item("msg_1") == {"id": "msg_1", "type": "message"}
    assert b.delete("resp_1") and a.get("resp_1") is None


def test_while_redis_is_away_writes_are_kept_and_written_when_it_returns(durable_redis: RedisServer) -> None:
    health = StoreHealth("redis")
    store, usage = RedisStore(state(durable_redis.url), health), RedisUsageStore(state(durable_redis.url), health)
    store.write([], [CounterDelta("main", "a", requests=1)])
    durable_redis.kill()
    store.write([AccountRecord("main", "a", status="cooling", until=50.0)], [CounterDelta("main", "a", requests=2)])
    usage.add([row(60, "a"), row(60, "a")], [entry("r1")])
    assert not health.up and store.changes_since(3) == ([], 3) and not store.lead("h", 5.0)
    assert usage.buffered() == 2  # one merged row, one recent entry
    durable_redis.restart()
    health._next_try = 0.0  # the backoff would let the next call through within seconds; now, for the test
    usage.add([], [])  # what the usage writer does on the keeper's tick
    store.write([], [])
    assert health.up
    (record,) = store.load()
    assert (record.status, record.requests) == ("cooling", 3)
    assert usage.query(UsageQuery(0, 120)).totals["requests"] == 2 and usage.buffered() == 0


def test_a_full_buffer_drops_rows_and_counts_them(monkeypatch: Any, fresh_redis: RedisServer,
                                                 caplog: Any) -> None:
    usage = RedisUsageStore(state(fresh_redis.url))
    usage.buffer.cap = 2
    fresh_redis.kill()
    usage.add([row(60, "a"), row(60, "a"), row(60, "b", requests=3)], [])  # two distinct rows: they fit
    # The batch that failed may have reached Redis (it is kept whole, to be sent again as it is):
    # it fills the buffer, so neither a third row nor more of "a" fits.
    usage.add([row(120, "c", requests=4), row(60, "a")], [])
    assert usage.buffered() == 2 and usage.overflow == 5
    assert "5 requests' usage dropped" in caplog.text


def test_health_backs_off_while_down_and_comes_back() -> None:
    now = [0.0]
    health = StoreHealth("redis", clock=lambda: now[0])
    back: list[bool] = []
    health.on_recovery(lambda: back.append(True))
    assert health.may_try()
    health.failed("refused")
    assert not health.up and not health.may_try()
    now[0] = 0.5
    assert health.may_try() and not health.may_try()  # one caller tries per period
    health.failed("refused")
    now[0] = 1.4
    assert not health.may_try()  # the period doubled: 1.0 s after the second failure
    now[0] = 1.6
    assert health.may_try()
    health.ok()
    assert health.up and back == [True] and health.public() == {"state": "ok", "state_backend": "redis"}


def test_a_redis_that_lost_its_data_is_seeded_again_from_the_workers(redis_url: str) -> None:
    from proxy.config import parse
    from proxy.pool.pool import AccountPool

    config = parse({"client_keys": ["sk-c"], "upstreams": [{
        "name": "main", "protocol": "chat_completions", "base_url": "http://127.0.0.1:9/v1",
        "accounts": [{"id": "a", "api_key": "sk-a"}, {"id": "b", "api_key": "sk-b"}]}]})
    pool, store = AccountPool(config.upstreams[0]), RedisStore(state(redis_url))
    pool.disable("a", "admin: revoked")
    store.write(*pool.pending())
    store.changes_since(0)  # a full read: notes the epoch
    assert not store.take_reseed()
    store.client.flushdb()  # Redis restarted without persistence
    store.resync_soon()
    assert store.changes_since(5) == ([], 0) and store.take_reseed() and not store.take_reseed()
    pool.restate()
    store.write(*pool.pending())
    stored = {r.id: r for r in store.load()}
    assert (stored["a"].status, stored["a"].reason, stored["b"].status) == ("disabled", "admin: revoked", "active")


def test_a_redis_config_without_the_redis_package_is_a_config_error(monkeypatch: Any, tmp_path: Any) -> None:
    import importlib.util

    import pytest

    from proxy.config import ConfigError
    from proxy.serving.config_check import checked

    path = tmp_path / "config.yaml"
    path.write_text("client_keys: [sk-c]\nstate: {backend: redis, url: 'redis://127.0.0.1:6379/0'}\n"
                    "upstreams: [{name: main, protocol: chat_completions, base_url: 'http://127.0.0.1:9/v1', "
                    "accounts: [{id: a, api_key: sk-a}]}]\n")
    assert checked(str(path)).state.backend == "redis"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "redis" else real(name, *a))
    with pytest.raises(ConfigError, match=r"state.backend: redis needs the redis package: pip install"):
        checked(str(path))


def test_usage_no_replica_acknowledged_is_sent_again_to_the_primary_that_replaces_it(
        fresh_redis: RedisServer, redis_url: str) -> None:
    """With Sentinel, a batch whose `WAIT 1` timed out (a replica lagging) is counted on the primary but
    kept; if the primary then dies, it goes again, before anything newer, to the one promoted — which
    never saw it — so the failover loses nothing. Here the old primary has no replica at all (every
    wait times out) and the promoted one is another server."""
    import redis

    sentinel = StateConfig(backend="redis", url=fresh_redis.url,
                           sentinel=SentinelConfig(hosts=(("127.0.0.1", 1),), service_name="main"))
    usage = RedisUsageStore(sentinel, StoreHealth("redis"), client=redis.Redis.from_url(fresh_redis.url))
    usage.add([row(60, "a")], [entry("r1")])
    assert usage.query(UsageQuery(0, 180)).totals["requests"] == 1  # counted on the old primary meanwhile
    fresh_redis.kill()
    usage.add([row(60, "a", requests=2)], [entry("r2")])  # the connection fails: kept, to send again
    assert not usage.health.up
    promoted = redis.Redis.from_url(redis_url)  # the replica Sentinel promotes: it never got the batch
    usage.client, usage._add = promoted, promoted.register_script(_ADD)
    usage.health._next_try = 0.0  # the backoff would let the next call through within seconds; now, for the test
    usage.add([], [])  # the keeper's tick
    answer = usage.query(UsageQuery(0, 180))
    assert answer.totals["requests"] == 3
    assert [e.request_id for e in usage.recent(10)] == ["r2", "r1"]
    usage.add([], [], purge_before=0)  # a batch sent again is applied once: a further write changes nothing
    assert usage.query(UsageQuery(0, 180)).totals["requests"] == 3
