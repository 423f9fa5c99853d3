"""USD budgets below the HTTP edge: the three stores — in memory, the state file and a real Redis
(its Lua scripts) — held to the same answers (hold, refuse, settle, expired holds charged in full);
the worst case a request reserves; the UTC day and month rolling over on a clock the test controls;
the refusal's words; alerts once per crossing."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.budgets import redis_store as redis_budget_module
from proxy.budgets import store as store_module
from proxy.budgets import windows
from proxy.budgets.alerts import Alerts
from proxy.budgets.guard import Budgets
from proxy.budgets.sizing import size
from proxy.budgets.store import Admitted, BudgetStore, SQLiteBudgetStore
from proxy.budgets.windows import Charge, Line, Refusal
from proxy.config import parse
from proxy.config.state import StateConfig
from proxy.ir.request import Message, Request, TextPart
from proxy.ir.response import Usage
from proxy.money.prices import PriceBook
from proxy.ops.records import RequestRecord
from proxy.routing import Router
from tests.state_files import open_state_file

PRICES = {"demo-*": {"input": 1, "output": 2, "cache_write": 3}}  # USD per million tokens


def config(**top: Any) -> Any:
    upstreams = [{"name": "u", "protocol": "chat_completions", "base_url": "http://u.invalid/v1",
                  "accounts": [{"id": "a", "api_key": "sk-a"}], "models": {"serve": ["demo-*"]}}]
    body: dict[str, Any] = {"client_keys": [{"name": "team", "key": "sk-team-0000", "budget": {"usd_per_day": 1}},
                                            {"name": "free", "key": "sk-free-0000"}],
                            "upstreams": upstreams, "pricing": {"models": PRICES}}
    return parse({**body, **top})


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BudgetStore]:
    if request.param == "memory":
        yield SQLiteBudgetStore.in_memory()
    elif request.param == "sqlite":
        yield SQLiteBudgetStore(open_state_file(tmp_path / "state.db"))
    else:
        from proxy.budgets.redis_store import RedisBudgetStore

        url = request.getfixturevalue("redis_url")
        redis_store = RedisBudgetStore(StateConfig(backend="redis", url=url, prefix=f"t{uuid.uuid4().hex[:6]}:"))
        yield redis_store
        redis_store.client.close()


def line(subject: str, amount: int, limit: int = 1000, window: str = "usd_per_day", period: str = "d1") -> Line:
    return Line(subject, window, period, limit, amount)


def charge(lines: list[Line], lease: str, cost: int) -> Charge:
    return Charge(tuple(lines), lease, cost)


def test_every_store_holds_exactly_the_budget_and_settles_to_the_real_cost(store: BudgetStore) -> None:
    held = [store.admit([line("key:a", 300)]) for _ in range(3)]
    assert [(a.refusal, a.spent) for a in held] == [(None, {})] * 3 and len({a.lease for a in held}) == 3
    leases = [a.lease for a in held]
    refused = store.admit([line("key:a", 300)])  # 3 x 300 held: 300 more would be 1200 > 1000
    assert refused == Admitted(Refusal(line("key:a", 300), 0, 900), {})
    assert store.figures([("key:a", "usd_per_day", "d1")]) == {("key:a", "usd_per_day"): (0, 900)}
    # the real cost replaces the hold; a request that failed is released (charged 0)
    assert store.settle([charge([line("key:a", 300)], leases[0], 120)]) == {("key:a", "usd_per_day", "d1"): (120, 120)}
    assert store.settle([charge([line("key:a", 300)], leases[1], 0)]) == {("key:a", "usd_per_day", "d1"): (120, 0)}
    assert store.figures([("key:a", "usd_per_day", "d1")]) == {("key:a", "usd_per_day"): (120, 300)}
    assert store.admit([line("key:a", 580)]).refusal is None  # 120 + 300 + 580 = 1000: exactly the budget
    assert store.admit([line("key:a", 1)]).refusal is not None


def test_the_charges_of_ended_requests_ride_in_the_next_admission_even_a_refused_one(store: BudgetStore) -> None:
    first = store.admit([line("key:a", 600)])
    assert first.refusal is None
    assert store.admit([line("key:a", 600)]).refusal is not None  # 600 held + 600 > 1000
    # the first ended having cost 100: charged in the same step as the next admission, which now fits
    third = store.admit([line("key:a", 600)], [charge([line("key:a", 600)], first.lease, 100)])
    assert (third.refusal, third.spent) == (None, {("key:a", "usd_per_day", "d1"): (100, 100)})
    # a refused admission still keeps the charges it carried
    refused = store.admit([line("key:a", 700)], [charge([line("key:a", 600)], third.lease, 250)])
    assert refused == Admitted(Refusal(line("key:a", 700), 350, 0), {("key:a", "usd_per_day", "d1"): (350, 250)})
    assert store.figures([("key:a", "usd_per_day", "d1")]) == {("key:a", "usd_per_day"): (350, 0)}


def test_several_charges_on_one_figure_add_up_in_one_step(store: BudgetStore) -> None:
    leases = [store.admit([line("key:a", 300), line("group:g", 300, 900)]).lease for _ in range(3)]
    assert all(leases)  # each held
    spent = store.settle([charge([line("key:a", 300), line("group:g", 300, 900)], lease, cost)
                          for lease, cost in zip(leases, (10, 20, 30), strict=True)])
    assert spent == {("key:a", "usd_per_day", "d1"): (60, 60), ("group:g", "usd_per_day", "d1"): (60, 60)}
    assert store.figures([("key:a", "usd_per_day", "d1"), ("group:g", "usd_per_day", "d1")]) == {
        ("key:a", "usd_per_day"): (60, 0), ("group:g", "usd_per_day"): (60, 0)}


def test_a_request_is_held_against_every_budget_at_once_or_none(store: BudgetStore) -> None:
    both = [line("key:a", 600), line("group:g", 600, limit=1000), line("key:a", 600, 5000, "usd_total", "total")]
    x = store.admit(both)
    assert x.refusal is None
    other = [line("key:b", 600), line("group:g", 600)]
    refused = store.admit(other).refusal
    assert refused is not None and refused.line.subject == "group:g" and refused.reserved == 600
    assert store.figures([("key:b", "usd_per_day", "d1")]) == {("key:b", "usd_per_day"): (0, 0)}  # nothing held
    assert store.settle([charge(both, x.lease, 250)]) == {("key:a", "usd_per_day", "d1"): (250, 250),
                                                      ("group:g", "usd_per_day", "d1"): (250, 250),
                                                      ("key:a", "usd_total", "total"): (250, 250)}
    assert store.admit(other).refusal is None  # 250 + 600 ≤ 1000 now


def test_an_expired_hold_is_charged_in_full_and_a_late_settle_charges_the_difference(
        store: BudgetStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "LEASE_TTL", -1.0)  # every hold is expired as soon as it is made
    monkeypatch.setattr(redis_budget_module, "LEASE_TTL", -1.0)
    dead = store.admit([line("key:a", 400)]).lease
    assert dead
    # the worker that held it died: the next sweep charges its full amount
    assert store.figures([("key:a", "usd_per_day", "d1")]) == {("key:a", "usd_per_day"): (400, 0)}
    # it did end after all: 400 - 400 + 150
    assert store.settle([charge([line("key:a", 400)], dead, 150)]) == {("key:a", "usd_per_day", "d1"): (150, -250)}


def test_the_sqlite_store_renews_holds_and_keeps_spend_across_a_restart(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    first = SQLiteBudgetStore(open_state_file(tmp_path / "s.db"), clock)
    lease = first.admit([line("key:a", 400)]).lease
    assert lease
    clock.now += 10
    first.renew([(lease, ["key:a"])])
    clock.now += 10  # 20 s after it was made, 10 after its renewal: still held
    assert first.figures([("key:a", "usd_per_day", "d1")]) == {("key:a", "usd_per_day"): (0, 400)}
    first.settle([charge([line("key:a", 400)], lease, 77)])
    again = SQLiteBudgetStore(open_state_file(tmp_path / "s.db"), clock)  # a restart
    assert again.figures([("key:a", "usd_per_day", "d1")]) == {("key:a", "usd_per_day"): (77, 0)}


def test_a_finished_requests_charge_rides_in_the_next_admission_or_goes_alone_when_flushed(tmp_path: Path) -> None:
    cfg = config()
    sent: list[int] = []
    store = SQLiteBudgetStore(open_state_file(tmp_path / "s.db"))
    admit, settle = store.admit, store.settle

    def admitting(*args: Any) -> Any:
        sent.append(1)
        return admit(*args)

    def settling(*args: Any) -> Any:
        sent.append(2)
        return settle(*args)

    store.at_once = None  # type: ignore[assignment]  # every call through the interface, counted
    store.admit = admitting  # type: ignore[method-assign,assignment]
    store.settle = settling  # type: ignore[method-assign,assignment]
    budgets = Budgets(store)
    (entry, _) = cfg.client_keys
    routes = Router(cfg.upstreams).resolve("demo-model")
    for tokens in (1000, 2000, 3000):
        record = RequestRecord("r", "team", "p", "demo-model", False)
        budgets.admit(cfg, entry, record, routes, lambda: Request(model="demo-model", max_tokens=1), lambda: 1, {})
        record.upstream, record.upstream_model = "u", "demo-model"
        record.finish(200, "ok", Usage(input_tokens=tokens))
        budgets.request_done(record)
    assert sent == [1, 1, 1]  # one step of the store per request: the charges rode in the admissions
    shown = budgets.figures(cfg, windows.subjects(cfg, entry))["key:team"]["usd_per_day"]
    assert sent == [1, 1, 1, 2]  # the operator's view sends the last one first
    assert (shown["spent_usd"], shown["reserved_usd"]) == (0.006, 0.0)


def test_the_worst_case_takes_the_margin_the_cap_and_the_dearest_route() -> None:
    cfg = config(budget_input_margin=0.5, budget_default_max_output_tokens=100)
    book = PriceBook(cfg)
    routes = Router(cfg.upstreams).resolve("demo-model")
    plain = Request(model="demo-model", messages=[Message("user", [TextPart("hi")])])
    # 1000 tokens * 1.5 at the cache-write price (3: the upstream caches by default) + 100 output at 2
    assert size(routes, book, cfg.budgets, 1000, plain, {}).amount == 1500 * 3 + 100 * 2
    capped = Request(model="demo-model", max_tokens=10)
    assert size(routes, book, cfg.budgets, 1000, capped, {}).amount == 4500 + 20
    # embeddings: the input tokens at the input price alone — no output cap, no cache write
    assert size(routes, book, cfg.budgets, 1000, None, {}, input_only=True).amount == 1500 * PRICES["demo-*"]["input"]
    assert size(Router(cfg.upstreams).resolve("unknown"), book, cfg.budgets, 10, plain, {}).unpriced == []
    unpriced = config(pricing={"models": {"other": {"input": 1, "output": 1}}})
    found = size(Router(unpriced.upstreams).resolve("demo-model"), PriceBook(unpriced), unpriced.budgets, 10,
                 plain, {})
    assert found.amount == 0 and [r.model for r in found.unpriced] == ["demo-model"]


def test_the_day_rolls_over_at_utc_midnight_and_the_month_on_the_first(tmp_path: Path) -> None:
    clock = Clock(dt.datetime(2026, 1, 31, 23, 59, 50, tzinfo=dt.UTC).timestamp())
    cfg = config(client_keys=[{"name": "team", "key": "sk-team-0000",
                               "budget": {"usd_per_day": 0.001, "usd_per_month": 0.0015}}])
    budgets = Budgets(SQLiteBudgetStore(open_state_file(tmp_path / "s.db"), clock), clock)
    (entry,) = cfg.client_keys
    routes = Router(cfg.upstreams).resolve("demo-model")

    def run(cost_tokens: int) -> None:
        record = RequestRecord("r", "team", "p", "demo-model", False)
        budgets.admit(cfg, entry, record, routes, lambda: Request(model="demo-model", max_tokens=100),
                      lambda: 100, {})
        record.upstream, record.upstream_model = "u", "demo-model"
        record.finish(200, "ok", Usage(input_tokens=cost_tokens, output_tokens=0))
        budgets.request_done(record)

    run(800)  # 800 µ$ of the day's 1000
    with pytest.raises(Exception, match=r"usd_per_day budget \(\$0\.001 a UTC day\): \$0\.0008 spent .* resets at "
                                        r"2026-02-01T00:00:00Z \(in 0m 10s\)"):
        run(1)  # the worst case (110 x 3 + 100 x 2 = 530 µ$) would go over
    clock.now += 10  # midnight, and the first of the month: both roll over
    run(400)  # its charge is queued; the operator's view sends it first
    shown = budgets.figures(cfg, windows.subjects(cfg, entry))["key:team"]
    assert shown["usd_per_day"]["spent_usd"] == 0.0004 and shown["usd_per_month"]["spent_usd"] == 0.0004
    assert shown["usd_per_day"]["resets_in"] == 86400


def test_alerts_fire_once_per_crossing_with_the_webhook(tmp_path: Path) -> None:
    posted: list[tuple[str, dict[str, Any]]] = []
    counted: list[tuple[str, str]] = []
    def post(url: str, payload: dict[str, Any]) -> int:
        posted.append((url, payload))
        return 200

    alerts = Alerts(on_alert=lambda s, w: counted.append((s, w)), post=post)
    cfg = config(client_keys=[{"name": "team", "key": "sk-team-0000",
                               "budget": {"usd_per_day": 0.01, "alert_at": 0.5}}],
                 alerts={"webhook_url": "http://127.0.0.1:9/hook"})
    budgets = Budgets(SQLiteBudgetStore(open_state_file(tmp_path / "s.db")), alerts=alerts)
    (entry,) = cfg.client_keys
    routes = Router(cfg.upstreams).resolve("demo-model")
    for tokens in (3000, 3000, 3000):  # 3000, 6000 (crosses 5000), 9000 µ$
        record = RequestRecord("r", "team", "p", "demo-model", False)
        budgets.admit(cfg, entry, record, routes, lambda: Request(model="demo-model", max_tokens=1), lambda: 1, {})
        record.upstream, record.upstream_model = "u", "demo-model"
        record.finish(200, "ok", Usage(input_tokens=tokens))
        budgets.request_done(record)
    for greenlet in alerts.sending:
        greenlet.join()
    assert counted == [("key:team", "usd_per_day")]
    assert [(u, p["subject"], p["window"], p["spent_usd"]) for u, p in posted] == [
        ("http://127.0.0.1:9/hook", "key:team", "usd_per_day", 0.006)]


def test_the_refusal_names_the_group_and_the_key() -> None:
    refusal = Refusal(Line("group:eng", "usd_total", "total", 5_000_000, 250_000), 4_900_000, 0)
    assert windows.message(refusal, "team", 0.0) == (
        "The key group 'eng' (which the API key 'team' is in) would go over its usd_total budget ($5.00 in total): "
        "$4.90 spent and $0.00 reserved by requests in flight, and this request may cost up to $0.25; it never "
        "resets (raise the budget to go on).")
