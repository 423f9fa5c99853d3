"""Per-client-key limits, below the HTTP edge: the config block, the rules (buckets, calendar
windows, reservations replaced by what was used), and the three stores — in memory, SQLite and a
real Redis (its Lua scripts) — held to the same answers."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.config import ConfigError, parse
from proxy.config.limits import KeyLimits
from proxy.config.state import StateConfig
from proxy.limits import rules
from proxy.limits.store import LimitStore, MemoryLimitStore, SQLiteLimitStore
from tests.state_files import open_state_file

UPSTREAMS = [{"name": "u", "protocol": "chat_completions", "base_url": "http://u.invalid/v1",
              "accounts": [{"id": "a", "api_key": "sk-a"}]}]


def keys_config(limits: object) -> object:
    return parse({"client_keys": [{"name": "team", "key": "sk-team", "limits": limits}], "upstreams": UPSTREAMS})


def test_the_limits_block_takes_exactly_its_five_names() -> None:
    config = keys_config({"requests_per_minute": 5, "tokens_per_minute": 1000, "tokens_per_day": 10_000,
                          "tokens_per_month": 100_000, "max_concurrent": 2})
    (entry,) = config.client_keys  # type: ignore[attr-defined]
    assert entry.limits == KeyLimits(5, 1000, 10_000, 100_000, 2)
    with pytest.raises(ConfigError, match=r"client_keys\[0\]\.limits\.rpm: unknown key"):
            keys_config({"rpm": 5})
    with pytest.raises(ConfigError, match=r"client_keys\[0\]\.limits\.max_concurrent: must be .*1"):
        keys_config({"max_concurrent": 0})
    with pytest.raises(ConfigError, match=r"client_keys\[0\]\.limits: sets no limit"):
        keys_config({})


def test_a_minute_bucket_refills_continuously_and_says_when_there_is_room() -> None:
    limits = KeyLimits(requests_per_minute=6)
    state: dict[str, list[float]] = {}
    for _ in range(6):
        assert rules.check(limits, state, 0, 0, 100.0) is None
        rules.reserve(limits, state, 0, 100.0)
    refusal = rules.check(limits, state, 0, 0, 100.0)
    assert refusal is not None and (refusal.limit, refusal.value, refusal.retry_after) == ("requests_per_minute", 6, 10)
    assert rules.check(limits, state, 0, 0, 109.0) is not None
    assert rules.check(limits, state, 0, 0, 110.0) is None  # one request's worth back after 60/6 s


def test_windows_reset_at_utc_midnight_and_on_the_first_of_the_month() -> None:
    late = dt.datetime(2026, 1, 31, 23, 59, 30, tzinfo=dt.UTC).timestamp()
    assert rules.window_end("tokens_per_day", late) - late == 30
    assert rules.window_end("tokens_per_month", late) - late == 30
    limits = KeyLimits(tokens_per_day=100)
    state: dict[str, list[float]] = {}
    rules.reserve(limits, state, 100, late)
    refusal = rules.check(limits, state, 0, 10, late)
    assert refusal is not None and refusal.retry_after == 30
    assert rules.check(limits, state, 0, 10, late + 31) is None


def test_a_request_above_a_whole_budget_runs_only_when_the_budget_is_untouched() -> None:
    limits = KeyLimits(tokens_per_minute=1000)
    state: dict[str, list[float]] = {}
    assert rules.check(limits, state, 0, 5000, 0.0) is None
    reserved = rules.reserve(limits, state, 5000, 0.0)
    assert reserved == {"tokens_per_minute": 1000}
    rules.settle(limits, state, reserved, 4000, 0.0, 0.0)  # it used 4000: the bucket is in debt
    refusal = rules.check(limits, state, 0, 1, 0.0)
    assert refusal is not None and refusal.retry_after == 181  # (4000 + 1 - 1000) tokens at 1000 a minute


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LimitStore]:
    if request.param == "memory":
        yield MemoryLimitStore()
    elif request.param == "sqlite":
        yield SQLiteLimitStore(open_state_file(tmp_path / "state.db"))
    else:
        from proxy.limits.redis_store import RedisLimitStore

        url = request.getfixturevalue("redis_url")
        redis_store = RedisLimitStore(StateConfig(backend="redis", url=url, prefix=f"t{uuid.uuid4().hex[:6]}:"))
        yield redis_store
        redis_store.client.close()


def test_every_store_lets_exactly_the_budget_through_and_charges_what_was_used(store: LimitStore) -> None:
    limits = KeyLimits(requests_per_minute=3, tokens_per_minute=10_000, tokens_per_day=2000)
    decisions = [store.admit("team", limits, 300, f"l{i}") for i in range(4)]
    assert [d.refusal is None for d in decisions] == [True, True, True, False]
    refused = decisions[3].refusal
    assert refused is not None and refused.limit == "requests_per_minute" and 1 <= refused.retry_after <= 20
    assert decisions[0].reserved == {"tokens_per_minute": 300, "tokens_per_day": 300}
    for i, decision in enumerate(decisions[:3]):  # each really used 50: the reservations give way
        store.settle("team", limits, decision.reserved, 50, f"l{i}", decision.at)
    budget = store.status("team", limits)
    assert budget["tokens_per_day"]["used"] == 150 and budget["tokens_per_day"]["remaining"] == 1850
    assert budget["requests_per_minute"]["used"] == 3 and budget["requests_per_minute"]["remaining"] == 0
    assert 0 < budget["tokens_per_day"]["resets_in"] <= 86400
    both = store.admit("team", limits, 1900, "l9")  # over the minute's requests and the day's tokens:
    assert both.refusal is not None and both.refusal.limit == "tokens_per_day"  # named: the one that frees up last
    day = KeyLimits(tokens_per_day=1000)
    big = store.admit("other", day, 900, "x")
    assert big.refusal is None and store.admit("other", day, 200, "y").refusal is not None  # 900 + 200 > 1000
    store.settle("other", day, big.reserved, 100, "x", big.at)
    assert store.admit("other", day, 200, "z").refusal is None  # 100 used + 200


def test_every_store_counts_requests_in_flight_until_they_end(store: LimitStore) -> None:
    limits = KeyLimits(max_concurrent=2)
    first, second = store.admit("team", limits, 0, "a"), store.admit("team", limits, 0, "b")
    assert first.refusal is None and second.refusal is None
    third = store.admit("team", limits, 0, "c")
    assert third.refusal is not None and third.refusal.limit == "max_concurrent"
    assert store.status("team", limits)["max_concurrent"] == {"limit": 2, "used": 2, "remaining": 0}
    store.renew({"team": ["a", "b"]})
    store.settle("team", limits, first.reserved, 0, "a", first.at)
    assert store.admit("team", limits, 0, "c").refusal is None
    assert rules.message("team", third.refusal) == (
        "The API key 'team' has 2 requests in flight, its max_concurrent limit; send this one when another has "
        "finished.")


def test_what_a_stand_in_took_still_weighs_what_is_left_of_it_when_replayed() -> None:
    limits = KeyLimits(requests_per_minute=60, tokens_per_minute=6000, tokens_per_day=10_000)
    taken = {"requests_per_minute": 1.0, "tokens_per_minute": 600.0, "tokens_per_day": 600.0}
    at = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC).timestamp()
    # 5 s later the minute buckets have drained 5 s' worth (a request a second, 100 tokens a second):
    # the request has gone from the request bucket, 100 of the 600 tokens are left; the day keeps all.
    assert rules.still_owed(limits, taken, at, at + 5) == {"tokens_per_minute": 100.0, "tokens_per_day": 600.0}
    assert rules.still_owed(limits, taken, at, at + 30) == {"tokens_per_day": 600.0}
    assert rules.still_owed(limits, taken, at, at + 86400) == {}  # another day: the day's share went with it
    given_back = rules.still_owed(limits, {"tokens_per_day": -200.0, "tokens_per_minute": -200.0}, at, at + 1)
    assert given_back == {"tokens_per_day": -200.0, "tokens_per_minute": -100.0}
    state: dict[str, list[float]] = {}
    rules.charge(limits, state, {"tokens_per_day": 600.0}, at)
    rules.charge(limits, state, {"tokens_per_day": -900.0}, at)
    assert rules.used_now("tokens_per_day", 10_000, state["tokens_per_day"], at) == 0.0  # never below nothing


def test_every_store_takes_a_replayed_charge_once(store: LimitStore) -> None:
    limits = KeyLimits(tokens_per_day=10_000)
    store.charge("team", limits, {"tokens_per_day": 700.0}, "token-1")
    store.charge("team", limits, {"tokens_per_day": 300.0}, "token-2")
    assert store.status("team", limits)["tokens_per_day"]["used"] == 1000
    if "Redis" in type(store).__name__:  # a charge sent again after its answer was lost: applied once
        store.charge("team", limits, {"tokens_per_day": 300.0}, "token-2")
        assert store.status("team", limits)["tokens_per_day"]["used"] == 1000


class Refusing(MemoryLimitStore):
    """A store that is down until told otherwise (as Redis away, or a full state file)."""

    down = True

    def admit(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise ConnectionError("away")
        return super().admit(*args, **kwargs)

    def charge(self, *args: Any, **kwargs: Any) -> None:
        if self.down:
            raise ConnectionError("away")
        super().charge(*args, **kwargs)

    def status(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise ConnectionError("away")
        return super().status(*args, **kwargs)


def test_the_limiter_owes_the_first_store_what_a_stand_in_took_and_replays_it(caplog: Any) -> None:
    from proxy.config.keys import ClientKey
    from proxy.ir.request import Message, Request, TextPart
    from proxy.ir.response import Usage
    from proxy.limits.limiter import Limiter
    from proxy.ops.records import RequestRecord
    from proxy.state import fallback

    now = [1000.0]
    first = Refusing()
    limiter = Limiter(fallback.reaches(first, None, MemoryLimitStore(), "limits hold"), clock=lambda: now[0])
    key = ClientKey(name="team", key="sk-team", limits=KeyLimits(tokens_per_day=1_000_000))
    request = Request(model="m", messages=[Message(role="user", parts=[TextPart("hello")])])
    for _ in range(3):  # admitted by memory while the first store is down
        record = RequestRecord("r", "team", "chat_completions", "m", False)
        limiter.admit(key, record, lambda: request, {})
        record.finish(200, "ok", Usage(input_tokens=90, output_tokens=10))
        limiter.request_done(record)
    assert limiter.owed() == 3
    assert caplog.text.count("failed (ConnectionError: away)") == 1  # one line for the outage
    first.down = False
    now[0] += fallback.RETRY_AFTER  # the first store is tried again…
    limiter.replay()  # …and what it is owed goes to it (a greenlet does this in the service)
    assert limiter.owed() == 0
    assert key.limits is not None and first.status("team", key.limits)["tokens_per_day"]["used"] == 300
