"""The pool's pure parts with a fake clock: classification, reset headers, selection, state
transitions, and the stores (SQLite shared by two 'workers')."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from proxy.config import parse
from proxy.pool.classify import Classifier, cooldown_until, rule
from proxy.pool.pool import AccountPool
from proxy.pool.state import ACTIVE, COOLING, DISABLED
from proxy.pool.store import MemoryStore, SQLiteStore


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def upstream(policy: str = "lru", accounts: int = 3, **pool: Any) -> Any:
    accts = [{"id": f"a{i}", "api_key": f"sk-key-{i:04d}", "weight": i + 1, "balance": 10 * (3 - i)}
             for i in range(accounts)]
    config = parse({"client_keys": ["c"], "upstreams": [{"name": "u", "protocol": "openai", "base_url": "http://u/v1",
                                                          "accounts": accts, "pool": {"policy": policy, **pool}}]})
    return config.upstreams[0]


@pytest.mark.parametrize(("status", "body", "klass", "action"), [
    (403, "Request blocked: estimated cost exceeds your limit", "request_too_large", "fail"),
    (413, "", "request_too_large", "fail"),
    (400, '{"error":{"code":"context_length_exceeded"}}', "request_too_large", "fail"),
    (400, "This model's maximum context length is 128000 tokens", "request_too_large", "fail"),
    (403, "Insufficient tokens in your account", "insufficient_tokens", "next"),
    (403, "Please upgrade your plan", "insufficient_tokens", "next"),
    (403, "Daily limit reached", "insufficient_tokens", "next"),
    (429, "rate limited", "exhausted", "cool"),
    (402, "payment required", "exhausted", "cool"),
    (401, "invalid key", "auth_invalid", "disable"),
    (529, '{"type":"error","error":{"type":"overloaded_error"}}', "overloaded", "next"),
    (403, "forbidden", "other", "fail"),
    (500, "boom", "other", "fail"),
    (400, "bad field", "other", "fail"),
])
def test_default_classification(status: int, body: str, klass: str, action: str) -> None:
    verdict = Classifier().classify(status, body)
    assert (verdict.klass, verdict.action) == (klass, action)


def test_config_rules_come_first() -> None:
    classifier = Classifier([rule(500, "quota", "exhausted", "cool"), rule(None, "maintenance", "down", "next")])
    assert classifier.classify(500, "monthly quota used").action == "cool"
    assert classifier.classify(502, "under maintenance").klass == "down"
    assert classifier.classify(500, "other").klass == "other"


@pytest.mark.parametrize(("headers", "wait"), [
    ({}, 60),
    ({"Retry-After": "30"}, 30),
    ({"retry-after-ms": "1500"}, 1.5),
    ({"Retry-After": "Thu, 01 Jan 2027 08:00:10 GMT"}, 10),
    ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, 360),
    ({"x-ratelimit-reset-tokens": "1m30.5s"}, 90.5),
    ({"x-ratelimit-reset-requests": "20ms"}, 0.02),
    ({"x-ratelimit-reset": "1798790405"}, 5),  # epoch seconds
    ({"anthropic-ratelimit-requests-reset": "2027-01-01T08:00:40Z"}, 40),
    ({"Retry-After": "9999999"}, 86400),  # not believed beyond a day
])
def test_cooldown_from_reset_headers(headers: dict[str, str], wait: float) -> None:
    now = 1798790400.0  # 2027-01-01T08:00:00Z
    assert cooldown_until(headers, now, default=60) == pytest.approx(now + wait)


def test_lru_excludes_tried_skips_cooling_disabled_and_full() -> None:
    clock = Clock()
    pool = AccountPool(upstream(accounts=3), clock=clock)
    order = []
    for _ in range(3):
        lease = pool.lease(set())
        assert lease is not None
        order.append(lease.account.id)
        lease.release()
        clock.now += 1
    assert order == ["a0", "a1", "a2"]  # each least recently used in turn
    assert pool.lease({"a0", "a1", "a2"}) is None
    pool.cool("a0", clock.now + 30, "exhausted")
    pool.disable("a1", "auth")
    lease = pool.lease(set())
    assert lease is not None and lease.account.id == "a2"
    assert pool.lease({"a2"}) is None
    avail = pool.availability()
    assert (avail.cooling, avail.disabled, avail.next_back) == (1, 1, 30)
    clock.now += 31  # the cooling account comes back by itself
    again = pool.lease({"a2"})
    assert again is not None and again.account.id == "a0" and pool.get("a0").status == ACTIVE  # type: ignore[union-attr]


def test_max_concurrency() -> None:
    up = parse({"client_keys": ["c"], "upstreams": [{"name": "u", "protocol": "openai", "base_url": "http://u/v1",
                                                      "accounts": [{"id": "a", "api_key": "k", "max_concurrency": 2}]}]})
    pool = AccountPool(up.upstreams[0], clock=Clock())
    first, second = pool.lease(set()), pool.lease(set())
    assert first is not None and second is not None and pool.lease(set()) is None
    assert pool.availability().busy == 1
    first.release()
    first.release()  # a second release changes nothing
    assert pool.lease(set()) is not None and pool.lease(set()) is None


def test_policies() -> None:
    by_balance = AccountPool(upstream("balance"), clock=Clock())
    assert [by_balance.lease(set()).account.id for _ in range(2)] == ["a0", "a0"]  # type: ignore[union-attr]
    round_robin = AccountPool(upstream("round_robin"), clock=Clock())
    picks = []
    for _ in range(4):
        lease = round_robin.lease(set())
        assert lease is not None
        picks.append(lease.account.id)
    assert picks == ["a0", "a1", "a2", "a0"]
    weighted = AccountPool(upstream("weighted"), clock=Clock(), rng=random.Random(7))
    counts = {"a0": 0, "a1": 0, "a2": 0}
    for _ in range(600):
        lease = weighted.lease(set())
        assert lease is not None
        counts[lease.account.id] += 1
        lease.release()
    assert counts["a0"] < counts["a1"] < counts["a2"]  # weights 1 : 2 : 3


def test_disabled_beats_cooling_and_cooling_keeps_the_later_reset() -> None:
    clock = Clock()
    pool = AccountPool(upstream(), clock=clock)
    pool.cool("a0", clock.now + 100, "exhausted")
    pool.cool("a0", clock.now + 10, "exhausted")
    assert pool.get("a0").until == clock.now + 100  # type: ignore[union-attr]
    pool.disable("a0", "auth")
    pool.cool("a0", clock.now + 5, "exhausted")
    state = pool.get("a0")
    assert state is not None and state.status == DISABLED and state.reason == "auth" and state.since == clock.now


def test_public_view_masks_the_key_and_the_proxy_password() -> None:
    up = parse({"client_keys": ["c"], "upstreams": [{"name": "u", "protocol": "openai", "base_url": "http://u/v1",
                "accounts": [{"id": "a", "api_key": "sk-secret-value-1234", "proxy": "http://user:pw@proxy:3128"}]}]})
    view = AccountPool(up.upstreams[0]).get("a").public(0)  # type: ignore[union-attr]
    assert view["key"] == "…1234" and view["proxy"] == "http://***@proxy:3128"
    assert "sk-secret" not in str(view) and "pw" not in str(view)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_store_shares_state_and_sums_counters_between_workers(kind: str, tmp_path: Path) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(str(tmp_path / "state.db"))
    clock = Clock()
    one, two = AccountPool(upstream(), clock=clock), AccountPool(upstream(), clock=clock)
    for _ in range(3):
        lease = one.lease(set())
        assert lease is not None
        lease.release(failure="exhausted" if lease.account.id == "a0" else None)
    one.cool("a0", clock.now + 50, "exhausted: HTTP 429")
    states, deltas = one.pending()
    store.write(states, deltas)
    records, version = store.changes_since(0)
    two.apply_remote(records)
    seen = two.get("a0")
    assert seen is not None and (seen.status, seen.until, seen.reason) == (COOLING, clock.now + 50, "exhausted: HTTP 429")
    assert store.changes_since(version) == ([], version)
    lease = two.lease(set())
    assert lease is not None and lease.account.id != "a0"  # the other worker skips it now
    lease.release()
    store.write(*two.pending())
    totals = {r.id: r for r in store.counters()}
    assert sum(r.requests for r in totals.values()) == 4 and totals["a0"].failures == {"exhausted": 1}
    assert store.lead("w1", 10) and not store.lead("w2", 10) and store.lead("w1", 10)


def test_runtime_accounts_and_removals_survive_a_restart(tmp_path: Path) -> None:
    from proxy.config import Account

    store = SQLiteStore(str(tmp_path / "state.db"))
    pool = AccountPool(upstream())
    pool.add(Account("new", "sk-new-account-9999", weight=2))
    pool.remove("a2")
    pool.disable("a1", "admin: maintenance")
    store.write(*pool.pending())
    restarted = AccountPool(upstream())
    restarted.apply_remote(store.load(), counters=True)
    ids = [s.id for s in restarted.states()]
    assert ids == ["a0", "a1", "new"]
    assert restarted.get("new").account.api_key == "sk-new-account-9999"  # type: ignore[union-attr]
    assert restarted.get("a1").status == DISABLED  # type: ignore[union-attr]


def test_a_write_between_reads_is_not_lost(tmp_path: Path) -> None:
    """changes_since must not report a version newer than the rows it returned: a concurrent write
    that commits after the rows were read would otherwise be skipped for good."""
    store = SQLiteStore(str(tmp_path / "state.db"))
    pool = AccountPool(upstream())
    pool.cool("a0", 2_000_000_000, "exhausted")
    store.write(*pool.pending())
    rows, seen = store.changes_since(0)
    pool.disable("a1", "auth")  # another worker writes now
    store.write(*pool.pending())
    later, _ = store.changes_since(seen)
    assert [r.id for r in rows] == ["a0"] and [r.id for r in later] == ["a1"]
