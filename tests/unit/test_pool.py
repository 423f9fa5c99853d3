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
from proxy.pool.proxies import BACKOFF_CAP, BACKOFF_FIRST
from proxy.pool.state import ACTIVE, COOLING, DISABLED
from proxy.pool.store import MemoryStore, SQLiteStore
from proxy.upstream.client import Target, UpstreamNetworkError
from proxy.upstream.keeper import PoolKeeper
from tests.state_files import open_state_file


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def upstream(policy: str = "lru", accounts: int = 3, **pool: Any) -> Any:
    accts = [{"id": f"a{i}", "api_key": f"sk-key-{i:04d}", "weight": i + 1, "balance": 10 * (3 - i)}
             for i in range(accounts)]
    config = parse({"client_keys": ["c"], "upstreams": [{"name": "u", "protocol": "chat_completions", "base_url": "http://u/v1",
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
    up = parse({"client_keys": ["c"], "upstreams": [{"name": "u", "protocol": "chat_completions", "base_url": "http://u/v1",
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


def test_public_view_masks_the_key_and_the_proxy_credentials() -> None:
    up = parse({"client_keys": ["c"], "upstreams": [{"name": "u", "protocol": "chat_completions", "base_url": "http://u/v1",
                "accounts": [{"id": "a", "api_key": "sk-secret-value-1234",
                              "proxy": "http://user:hunter2@proxy:3128"}]}]})
    pool = AccountPool(up.upstreams[0])
    view = pool.view(pool.get("a"), 0)  # type: ignore[arg-type]
    assert view["key"] == "…1234" and [p["url"] for p in view["proxies"]] == ["http://proxy:3128"]
    assert "sk-secret" not in str(view) and "hunter2" not in str(view) and "user" not in str(view)


def test_the_last_failed_attempt_is_kept_as_the_accounts_last_error() -> None:
    clock = Clock()
    pool = AccountPool(upstream(accounts=1), clock=clock)
    assert pool.view(pool.get("a0"), clock.now)["last_error"] is None  # type: ignore[arg-type]
    lease = pool.lease(set())
    assert lease is not None
    lease.release(failure="overloaded", error="overloaded: HTTP 529: Overloaded")
    clock.now += 5
    pool.lease(set()).release(failure="client_gone")  # type: ignore[union-attr]  # the client left: not the account's error
    pool.lease(set()).release()  # type: ignore[union-attr]  # a success does not erase the last error
    view = pool.view(pool.get("a0"), clock.now)  # type: ignore[arg-type]
    assert view["status"] == ACTIVE  # `next`: the account stays in rotation, and the page still says what happened
    assert view["last_error"] == {"class": "overloaded", "message": "overloaded: HTTP 529: Overloaded",
                                  "at": clock.now - 5}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_store_shares_state_and_sums_counters_between_workers(kind: str, tmp_path: Path) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(open_state_file(tmp_path / "state.db"))
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

    store = SQLiteStore(open_state_file(tmp_path / "state.db"))
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
    store = SQLiteStore(open_state_file(tmp_path / "state.db"))
    pool = AccountPool(upstream())
    pool.cool("a0", 2_000_000_000, "exhausted")
    store.write(*pool.pending())
    rows, seen = store.changes_since(0)
    pool.disable("a1", "auth")  # another worker writes now
    store.write(*pool.pending())
    later, _ = store.changes_since(seen)
    assert [r.id for r in rows] == ["a0"] and [r.id for r in later] == ["a1"]


# ---------------------------------------------------------------- outbound proxies

P1, P2, TOP = "http://p1:3128", "socks5h://user:pw@p2:1080", "http://top:3128"


def proxied_upstream() -> Any:
    config = parse({"client_keys": ["c"], "proxies": [TOP], "upstreams": [{
        "name": "u", "protocol": "chat_completions", "base_url": "http://u/v1", "accounts": [
            {"id": "own", "api_key": "sk-key-own", "proxy": [P1, P2]}, {"id": "plain", "api_key": "sk-key-plain"}]}]})
    return config.upstreams[0]


def test_proxies_are_chosen_healthy_first_in_order_and_back_off_per_failure() -> None:
    clock = Clock()
    pool = AccountPool(proxied_upstream(), clock=clock)
    own, plain = (pool.get(i).account for i in ("own", "plain"))  # type: ignore[union-attr]
    assert pool.proxies_of(own) == (P1, P2) and pool.proxies_of(plain) == (TOP,)
    assert pool.choose_proxy(own, set()) == P1 and pool.choose_proxy(own, {P1}) == P2
    waits = [pool.proxy_failed(P1, "refused the connection") for _ in range(7)]
    assert waits == [BACKOFF_FIRST * 2 ** i for i in range(5)] + [BACKOFF_CAP, BACKOFF_CAP]
    assert pool.choose_proxy(own, set()) == P2  # the cooling one is skipped
    pool.proxy_failed(P2, "closed the connection")
    assert pool.choose_proxy(own, set()) is None
    lease = pool.lease(set())
    assert lease is not None and lease.account.id == "plain"  # `own` is out until a proxy may be tried
    avail = pool.availability()
    assert (avail.proxies_cooling, avail.cooling, avail.disabled) == (1, 0, 0)
    assert avail.next_back == pytest.approx(BACKOFF_FIRST)  # P2 comes back first
    clock.now += BACKOFF_FIRST
    assert pool.choose_proxy(own, set()) == P2  # on trial again
    pool.proxy_failed(P2, "refused the connection")
    assert pool.view(pool.get("own"), clock.now)["proxies"][1]["until"] == clock.now + 2 * BACKOFF_FIRST  # type: ignore[arg-type]
    pool.proxy_ok(P1)
    assert pool.choose_proxy(own, set()) == P1
    assert [p["status"] for p in pool.view(pool.get("own"), clock.now)["proxies"]] == ["ok", "cooling"]  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_proxy_states_are_shared_between_workers(kind: str, tmp_path: Path) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(open_state_file(tmp_path / "state.db"))
    clock = Clock()
    one, two = AccountPool(proxied_upstream(), clock=clock), AccountPool(proxied_upstream(), clock=clock)
    one.proxy_failed(P2, "refused the connection")
    store.write([], [], one.pending_proxies())
    records, version = store.proxy_changes_since(0)
    assert "p2" not in str(records) and "pw" not in str(records)  # stored by digest, never by URL
    two.apply_remote_proxies(records)
    own = two.get("own").account  # type: ignore[union-attr]
    assert two.choose_proxy(own, {P1}) is None
    one.proxy_ok(P2)
    store.write([], [], one.pending_proxies())
    later, _ = store.proxy_changes_since(version)
    two.apply_remote_proxies(later)
    assert two.choose_proxy(own, {P1}) == P2


class FakeClient:
    """Answers probes: with an HTTP status, or by raising the proxy failure it is given."""

    def __init__(self, answer: int | UpstreamNetworkError) -> None:
        self.answer = answer
        self.sent: list[Target] = []

    def send(self, target: Target, path: str, body: Any, **_: Any) -> Any:
        self.sent.append(target)
        if isinstance(self.answer, UpstreamNetworkError):
            raise self.answer

        class Response:
            status_code, headers = self.answer, {}

            def close(self) -> None:
                pass

        return Response()


def proxy_down() -> UpstreamNetworkError:
    from proxy.ir.response import ErrorInfo
    return UpstreamNetworkError(ErrorInfo("upstream_error", "outbound proxy … refused the connection", 502), "proxy",
                                "refused the connection")


def test_the_keeper_probes_a_cooling_proxy_and_restores_it_once_it_answers() -> None:
    import gevent

    clock = Clock()
    pool = AccountPool(proxied_upstream(), clock=clock)
    pool.proxy_failed(P1, "refused the connection")
    client = FakeClient(proxy_down())
    keeper = PoolKeeper({"u": pool}, MemoryStore(), client)  # type: ignore[arg-type]
    interval = pool.settings.probe.interval
    assert keeper.maintain(clock.now + interval - 1) == []  # not due yet
    gevent.joinall(keeper.maintain(clock.now + interval))
    (probe,) = client.sent
    assert (probe.proxy, dict(probe.auth_headers), probe.base_url) == (
        P1, {"Authorization": "Bearer sk-key-own"}, "http://u/v1")  # a user's key
    view = pool.view(pool.get("own"), clock.now)["proxies"][0]  # type: ignore[arg-type]
    assert (view["status"], view["consecutive_failures"]) == ("cooling", 2)  # still down: backs off further
    client.answer = 401  # any HTTP answer came through the proxy
    gevent.joinall(keeper.maintain(clock.now + 2 * interval))
    view = pool.view(pool.get("own"), clock.now)["proxies"][0]  # type: ignore[arg-type]
    assert (view["status"], view["consecutive_failures"], view["reason"]) == ("ok", 0, None)
    assert keeper.maintain(clock.now + 10 * interval) == []  # nothing left to probe
