"""The usage store and its query, without a server: per-minute aggregation, group_by, buckets,
the since/until edges, retention, CSV, the recent list — for the SQLite store and the in-memory one
alike — and the writer that commits each request's figures before the request goes on."""

from __future__ import annotations

import csv
import io
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import pytest

from proxy.errors import ProxyError
from proxy.ir.response import Usage
from proxy.ops.recent import entry_json, recent_entry
from proxy.ops.records import RequestRecord
from proxy.ops.sqlite_usage_store import SQLiteUsageStore
from proxy.ops.usage import usage_row
from proxy.ops.usage_query import answer_csv, answer_json, parse_query
from proxy.ops.usage_store import (
    RECENT_CAP,
    MemoryUsageStore,
    RecentEntry,
    UsageQuery,
    UsageRow,
    UsageStore,
)
from proxy.ops.usage_writer import THREAD_EVERY, UsageWriter
from tests.state_files import open_state_file

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[UsageStore]:
    if request.param == "memory":
        yield MemoryUsageStore()
        return
    sqlite = SQLiteUsageStore(open_state_file(tmp_path / "state.db"))
    yield sqlite
    sqlite.close()


def row(minute: int, key: str = "alice", model: str = "gpt-4o", upstream: str = "main", account: str = "a1",
        outcome: str = "ok", status: int = 200, stream: bool = False, tokens: tuple[int, ...] = (10, 5, 2, 0, 1),
        ttfb: int | None = 100, duration: int = 300) -> UsageRow:
    inp, out, cached, written, reasoning = tokens
    return UsageRow(minute=minute, client_key=key, client_protocol="chat_completions", model=model,
                    upstream_model=model if upstream else "", upstream=upstream, account=account, stream=stream,
                    outcome=outcome, status=status, requests=1, errors=int(outcome != "ok"), input_tokens=inp,
                    output_tokens=out, cached_tokens=cached, cache_write_tokens=written, reasoning_tokens=reasoning,
                    first_byte_ms_sum=ttfb or 0, first_byte_count=int(ttfb is not None), duration_ms_sum=duration)


def everything(group_by: tuple[str, ...] = (), bucket: str | None = None) -> UsageQuery:
    return UsageQuery(since=0, until=T0 + 10 * 86400, group_by=group_by, bucket=bucket)


def test_requests_are_summed_per_minute_and_group(store: UsageStore) -> None:
    store.add([row(T0), row(T0), row(T0 + 60, key="bob"), row(T0 + 60, key="bob", outcome="rate_limit", status=429,
                                                              tokens=(0, 0, 0, 0, 0), ttfb=None)], [])
    store.add([row(T0, tokens=(100, 50, 20, 7, 9))], [])  # a later batch adds to the same minute row
    answer = store.query(everything(("client_key",)))
    assert answer.rows == [
        {"client_key": "alice", "requests": 3, "errors": 0, "input_tokens": 120, "output_tokens": 60,
         "cached_tokens": 24, "cache_write_tokens": 7, "reasoning_tokens": 11, "cost_micros": 0,
         "cost_unknown_requests": 0, "cache_saved_micros": 0, "first_byte_ms_sum": 300,
         "first_byte_count": 3, "duration_ms_sum": 900},
        {"client_key": "bob", "requests": 2, "errors": 1, "input_tokens": 10, "output_tokens": 5,
         "cached_tokens": 2, "cache_write_tokens": 0, "reasoning_tokens": 1, "cost_micros": 0,
         "cost_unknown_requests": 0, "cache_saved_micros": 0, "first_byte_ms_sum": 100,
         "first_byte_count": 1, "duration_ms_sum": 600}]
    totals = answer.totals
    assert (totals["requests"], totals["errors"], totals["input_tokens"]) == (5, 1, 130)
    for name in ("requests", "errors", "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"):
        assert sum(r[name] for r in answer.rows) == totals[name]  # one snapshot: rows add up to the totals


def test_group_by_any_dimensions_and_none(store: UsageStore) -> None:
    store.add([row(T0, model="m1", account="a1"), row(T0, model="m1", account="a2", stream=True),
               row(T0, model="m2", account="a1", stream=True), row(T0, model="", upstream="", account="",
                                                                       outcome="invalid_request", status=400)], [])
    by_model = store.query(everything(("model", "stream")))
    assert [(r["model"], r["stream"], r["requests"]) for r in by_model.rows] == [
        ("", False, 1), ("m1", False, 1), ("m1", True, 1), ("m2", True, 1)]
    by_account = store.query(everything(("upstream", "account", "outcome", "status")))
    assert [(r["account"], r["outcome"], r["status"], r["requests"]) for r in by_account.rows] == [
        ("", "invalid_request", 400, 1), ("a1", "ok", 200, 2), ("a2", "ok", 200, 1)]
    shown = answer_json(everything(("upstream", "account")), by_account)
    assert shown["rows"][0]["upstream"] is None and shown["rows"][0]["account"] is None  # unknown: null
    (whole,) = store.query(everything()).rows  # no group_by: one row for the window
    assert whole["requests"] == 4


def test_buckets_carry_the_time_of_their_start(store: UsageStore) -> None:
    store.add([row(T0), row(T0 + 60), row(T0 + 3600 + 120), row(T0 + 86400 + 60)], [])
    minutes = answer_json(everything(bucket="minute"), store.query(everything(bucket="minute")))
    assert [(r["time"], r["requests"]) for r in minutes["rows"]] == [
        ("2026-01-01T00:00:00Z", 1), ("2026-01-01T00:01:00Z", 1), ("2026-01-01T01:02:00Z", 1),
        ("2026-01-02T00:01:00Z", 1)]
    hours = answer_json(everything(("client_key",), "hour"), store.query(everything(("client_key",), "hour")))
    assert [(r["time"], r["client_key"], r["requests"]) for r in hours["rows"]] == [
        ("2026-01-01T00:00:00Z", "alice", 2), ("2026-01-01T01:00:00Z", "alice", 1),
        ("2026-01-02T00:00:00Z", "alice", 1)]
    days = store.query(everything(bucket="day"))
    assert [(r["time"], r["requests"]) for r in days.rows] == [(T0, 3), (T0 + 86400, 1)]


def test_since_is_included_and_until_excluded_by_the_minute(store: UsageStore) -> None:
    store.add([row(T0 - 60), row(T0), row(T0 + 240), row(T0 + 300)], [])
    assert store.query(UsageQuery(since=T0, until=T0 + 300)).totals["requests"] == 2  # T0 and T0+240
    # Times are taken to whole minutes: since down, until up — so "until now" covers this minute.
    query, _ = parse_query({"since": str(T0 + 30), "until": str(T0 + 250)}, now=0)
    assert (query.since, query.until) == (T0, T0 + 300)
    assert store.query(query).totals["requests"] == 2
    query, _ = parse_query({"since": "2026-01-01T00:05:00Z", "until": "2026-01-01T00:05:00.5+00:00"}, now=0)
    assert store.query(query).totals["requests"] == 1 and (query.since, query.until) == (T0 + 300, T0 + 360)
    shown = answer_json(query, store.query(query))
    assert (shown["since"], shown["until"]) == ("2026-01-01T00:05:00Z", "2026-01-01T00:06:00Z")


def test_retention_drops_old_minutes(store: UsageStore) -> None:
    store.add([row(T0 - 86400), row(T0 - 61), row(T0), row(T0 + 60)], [])
    store.add([], [], purge_before=T0)
    assert store.query(everything(bucket="minute")).totals["requests"] == 2
    assert [r["time"] for r in store.query(everything(bucket="minute")).rows] == [T0, T0 + 60]


def test_csv_has_a_header_and_one_line_per_row(store: UsageStore) -> None:
    store.add([row(T0, stream=True), row(T0, model="", upstream="", account="", outcome="invalid_request",
                                         status=400, ttfb=None)], [])
    query = everything(("model", "upstream", "stream"), "minute")
    lines = list(csv.reader(io.StringIO(answer_csv(query, store.query(query)))))
    assert lines == [
        ["time", "model", "upstream", "stream", "requests", "errors", "input_tokens", "output_tokens",
         "cached_tokens", "cache_write_tokens", "reasoning_tokens", "cost_usd", "cost_unknown_requests",
         "cache_saved_usd", "cache_hit_rate", "avg_first_byte_ms", "avg_duration_ms"],
        ["2026-01-01T00:00:00Z", "", "", "false", "1", "1", "10", "5", "2", "0", "1", "0.000000", "0", "0.000000",
         "0.2", "", "300"],
        ["2026-01-01T00:00:00Z", "gpt-4o", "main", "true", "1", "0", "10", "5", "2", "0", "1", "0.000000", "0",
         "0.000000", "0.2", "100", "300"]]


def entry(n: int) -> RecentEntry:
    return RecentEntry(request_id=f"req-{n}", time=T0 + n, client_key="alice", client_protocol="messages",
                       model="m", upstream_model="m", upstream="main", account="a1", stream=bool(n % 2), status=200,
                       outcome="ok", attempts=1, first_byte_ms=5, duration_ms=9, input_tokens=n, output_tokens=1)


def test_the_recent_list_is_newest_first_and_capped(store: UsageStore) -> None:
    store.add([], [entry(n) for n in range(RECENT_CAP - 10)])
    store.add([], [entry(n) for n in range(RECENT_CAP - 10, RECENT_CAP + 25)])
    newest = store.recent(3)
    assert [e.request_id for e in newest] == [f"req-{RECENT_CAP + 24}", f"req-{RECENT_CAP + 23}",
                                              f"req-{RECENT_CAP + 22}"]
    assert newest[0] == entry(RECENT_CAP + 24)  # every field back as it went in (a bool stays a bool)
    kept = store.recent(RECENT_CAP + 100)
    assert len(kept) == RECENT_CAP and kept[-1].request_id == "req-25"


def test_a_record_becomes_a_row_and_an_entry() -> None:
    record = RequestRecord("req-1", "alice", "messages", model="claude-x", stream=True, started=T0 + 59.9)
    record.upstream, record.account, record.upstream_model, record.attempts = "main", "a2", "up-model", 2
    record.first_byte_s = 0.25
    record.finish(200, "client_gone", Usage(input_tokens=30, output_tokens=7, cache_read_tokens=20,
                                            cache_write_tokens=4, reasoning_tokens=3))
    got = usage_row(record)
    assert (got.minute, got.client_key, got.model, got.upstream_model, got.account, got.stream) == (
        T0, "alice", "claude-x", "up-model", "a2", True)
    assert (got.requests, got.errors, got.outcome, got.status) == (1, 0, "client_gone", 200)  # not an error
    assert (got.input_tokens, got.output_tokens, got.cached_tokens, got.cache_write_tokens,
            got.reasoning_tokens) == (30, 7, 20, 4, 3)
    assert (got.first_byte_ms_sum, got.first_byte_count) == (250, 1)
    shown = entry_json(recent_entry(record))
    assert shown["time"] == "2026-01-01T00:00:59.900Z" and shown["first_byte_ms"] == 250
    assert (shown["client_key"], shown["attempts"], shown["input_tokens"], shown["output_tokens"]) == (
        "alice", 2, 30, 7)
    refused = RequestRecord("req-2", "-", "chat_completions", model="", stream=False, started=T0)
    refused.finish(401, "authentication")
    got = usage_row(refused)
    assert (got.upstream, got.account, got.errors, got.input_tokens, got.first_byte_count) == ("", "", 1, 0, 0)


@pytest.mark.parametrize(("args", "message"), [
    ({"groupby": "model"}, "groupby: unknown parameter; /admin/usage takes since, until, group_by, bucket, format"),
    ({"since": "yesterday"}, "since: must be ISO 8601 such as 2025-01-31T12:00:00Z or 2025-01-31, or epoch seconds"),
    ({"until": "-5"}, "until: must be a time between 1970 and 9999"),
    ({"since": "nan"}, "since: must be a time between 1970 and 9999"),
    ({"since": "2026-01-02", "until": "2026-01-01"}, "since: must be earlier than until (2026-01-02T00:00:00Z is "
                                                     "not before 2026-01-01T00:00:00Z)"),
    ({"group_by": "model,key"}, "group_by: 'key' is not something usage is grouped by; use a comma-separated list "
                                "of client_key, client_protocol, model, upstream_model, upstream, account, stream, "
                                "outcome, status"),
    ({"bucket": "week"}, "bucket: must be one of minute, hour, day (got 'week')"),
    ({"bucket": "minute", "since": "2025-01-01", "until": "2026-01-01"}, "bucket: bucket=minute from since to until "
                                                                         "makes 525600 time buckets, more than 50000"),
    ({"format": "xml"}, "format: must be json or csv (got 'xml')"),
])
def test_bad_parameters_say_what_to_fix(args: dict[str, str], message: str) -> None:
    with pytest.raises(ProxyError) as caught:
        parse_query(args, now=T0)
    assert caught.value.info.status == 400 and caught.value.info.message.startswith(message), caught.value.info.message


def test_parameters_have_defaults_and_take_both_time_forms() -> None:
    query, answer_format = parse_query({}, now=T0 + 10)
    assert (query.since, query.until, query.group_by, query.bucket, answer_format) == (
        T0 - 86400, T0 + 60, (), None, "json")
    query, answer_format = parse_query({"since": "2026-01-01T00:00", "until": str(T0 + 3600), "format": "csv",
                                        "group_by": "model, client_key,model", "bucket": "hour"}, now=0)
    assert (query.since, query.until, query.group_by, query.bucket, answer_format) == (
        T0, T0 + 3600, ("model", "client_key"), "hour", "csv")
    assert parse_query({"since": "2026-01-01T01:00:00+02:00", "until": "2026-01-01"}, now=0)[0].since == T0 - 3600


class CountingStore(MemoryUsageStore):
    """An in-memory store that says it blocks, so the writer goes through its greenlet; counts commits."""

    blocking = True

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[tuple[int, int]] = []

    def add(self, usage: Any, recent: Any, purge_before: int | None = None) -> None:
        gevent.sleep(0)  # a commit takes a while: others queue meanwhile
        self.commits.append((len(usage), len(recent)))
        super().add(usage, recent, purge_before)

    def try_add(self, usage: Any, recent: Any) -> bool:
        return False  # never at once: every commit goes through the writer's greenlet


class AtOnceStore(CountingStore):
    """Writes at once when it can (as SQLite does when no other process holds the write lock)."""

    def __init__(self) -> None:
        super().__init__()
        self.at_once: list[tuple[int, int]] = []
        self.free = True

    def try_add(self, usage: Any, recent: Any) -> bool:
        if not self.free:
            return False
        self.at_once.append((len(usage), len(recent)))
        MemoryUsageStore.add(self, usage, recent)
        return True


def test_a_commit_is_made_at_once_when_the_store_can_and_on_the_thread_otherwise() -> None:
    store = AtOnceStore()
    writer = UsageWriter(store, retention_days=90, clock=lambda: float(T0))
    writer.add(usage=row(T0))  # the first write purges by retention: the thread's
    assert (store.commits, store.at_once) == ([(1, 0)], [])
    writer.add(recent=entry(0), wait=False)
    writer.add(usage=row(T0))
    assert (store.commits, store.at_once) == ([(1, 0)], [(1, 1)])  # at once, the recent entry with it
    store.free = False  # another process is writing
    writer.add(usage=row(T0))
    assert (store.commits, store.at_once) == ([(1, 0), (1, 0)], [(1, 1)])
    store.free = True
    for _ in range(THREAD_EVERY + 1):
        writer.add(usage=row(T0))
    assert len(store.at_once) == 1 + THREAD_EVERY and len(store.commits) == 3  # one in THREAD_EVERY on the thread
    assert store.query(everything()).totals["requests"] == 4 + THREAD_EVERY


def test_sqlite_writes_at_once_only_while_no_other_process_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    store = SQLiteUsageStore(open_state_file(path))
    other = sqlite3.connect(path, isolation_level=None)  # as another worker would
    other.execute("BEGIN IMMEDIATE")
    assert store.try_add([row(T0)], [entry(0)]) is False
    other.execute("COMMIT")
    assert store.try_add([row(T0)], [entry(0)]) is True
    assert store.query(everything()).totals["requests"] == 1 and len(store.recent(10)) == 1
    other.close()
    store.close()


def test_the_writer_commits_before_the_request_goes_on_and_shares_commits() -> None:
    store = CountingStore()
    writer = UsageWriter(store, retention_days=90, clock=lambda: float(T0))
    writer.add(recent=entry(0), wait=False)  # the recent list does not wait: it goes with the next commit
    writer.add(usage=row(T0), wait=True)
    assert store.commits == [(1, 1)]  # one transaction for both
    assert store.query(everything()).totals["requests"] == 1

    seen: list[int] = []

    def request(n: int) -> None:
        writer.add(usage=row(T0, key=f"k{n % 3}"), wait=True)
        seen.append(store.query(everything()).totals["requests"])  # written before the request goes on

    gevent.joinall([gevent.spawn(request, n) for n in range(50)])
    assert store.query(everything()).totals["requests"] == 51
    assert all(count >= 2 for count in seen)
    assert sum(n for n, _ in store.commits) == 51 and len(store.commits) < 10  # concurrent requests share commits


def test_a_failed_commit_is_logged_and_never_raises_into_the_request(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(CountingStore):
        def add(self, usage: Any, recent: Any, purge_before: int | None = None) -> None:
            raise OSError("disk full")

    writer = UsageWriter(Broken(), retention_days=90)
    writer.add(usage=row(T0), wait=True)
    assert "writing 1 usage rows and 0 recent requests to the state store failed" in caplog.text


def test_the_writer_purges_by_retention_once_in_a_while() -> None:
    store = CountingStore()
    now = [float(T0)]
    writer = UsageWriter(store, retention_days=2, clock=lambda: now[0])
    store.add([row(T0 - 3 * 86400), row(T0 - 86400)], [])
    writer.add(usage=row(T0))
    assert store.query(everything()).totals["requests"] == 2  # the first write purged the oldest
    store.add([row(T0 - 3 * 86400)], [])
    writer.add(usage=row(T0))
    assert store.query(everything()).totals["requests"] == 4  # not again until PURGE_EVERY has passed
    now[0] += 601
    writer.add(usage=row(T0))
    assert store.query(everything()).totals["requests"] == 4


# ------------------------------------------------------------ cost


def priced(minute: int, micros: int | None, saved: int = 0, version: str = "config", key: str = "alice") -> UsageRow:
    got = row(minute, key=key)
    got.cost_micros, got.cost_unknown_requests = micros or 0, int(micros is None)
    got.cache_saved_micros, got.price_version = saved, version if micros is not None else ""
    return got


def test_costs_sum_exactly_in_micro_dollars_by_price_version_and_show_in_dollars(store: UsageStore) -> None:
    store.add([priced(T0, 11_340, saved=500), priced(T0, 1, version="genai-prices 0.2.3"), priced(T0, None),
               priced(T0 + 60, 999_999, key="bob")], [])
    store.add([priced(T0, 660, saved=5)], [])
    by_version = store.query(everything(("price_version",)))
    assert [(r["price_version"], r["cost_micros"], r["cost_unknown_requests"], r["requests"])
            for r in by_version.rows] == [("", 0, 1, 1), ("config", 1_011_999, 0, 3), ("genai-prices 0.2.3", 1, 0, 1)]
    shown = answer_json(everything(("client_key",)), store.query(everything(("client_key",))))
    alice, bob = shown["rows"]
    assert (alice["cost_usd"], alice["cost_unknown_requests"], alice["cache_saved_usd"]) == (0.012001, 1, 0.000505)
    assert (bob["cost_usd"], shown["totals"]["cost_usd"]) == (0.999999, 1.012)
    assert alice["cache_hit_rate"] == 0.2  # 2 cached of 10 input, in each row
    query = everything(("client_key",))
    lines = list(csv.DictReader(io.StringIO(answer_csv(query, store.query(query)))))
    assert [(r["cost_usd"], r["cache_saved_usd"]) for r in lines] == [("0.012001", "0.000505"), ("0.999999", "0.000000")]


def test_the_recent_list_keeps_each_requests_cost(store: UsageStore) -> None:
    record = RequestRecord("r1", "alice", "chat_completions", "gpt-4o", False, upstream="main", account="a1",
                           upstream_model="gpt-4o", status=200, usage=Usage(10, 5))
    record.cost_micros = 11_340
    unknown = RequestRecord("r2", "alice", "chat_completions", "gpt-4o", False, status=200, usage=Usage(10, 5))
    store.add([], [recent_entry(record), recent_entry(unknown)])
    newest, older = store.recent(2)
    assert (entry_json(newest)["cost_usd"], entry_json(older)["cost_usd"]) == (None, 0.01134)
    counted = usage_row(unknown)
    assert (counted.cost_unknown_requests, counted.cost_micros, counted.price_version) == (1, 0, "")


def test_usage_is_grouped_by_endpoint_and_served_model_on_every_row(store: UsageStore) -> None:
    """The endpoint the client called (its protocol's name when the edge named none) and the client
    model that answered (the one asked for, unless a fallback did) are dimensions like the others:
    each row of a query grouped by them carries a value, in JSON and in CSV."""
    chat = RequestRecord("r1", "alice", "chat_completions", "opus", False, endpoint="chat_completions")
    chat.finish(200, "ok", Usage(10, 5))
    fell_back = RequestRecord("r2", "alice", "messages", "opus", True, endpoint="messages", served_model="sonnet")
    fell_back.finish(200, "ok", Usage(7, 3))
    embedded = RequestRecord("r3", "bob", "chat_completions", "embed-1", False, endpoint="embeddings")
    embedded.finish(200, "ok", Usage(4, 0))
    unnamed = RequestRecord("r4", "bob", "responses", "opus", False)  # an edge that names no endpoint
    unnamed.finish(400, "invalid_request")
    for record in (chat, fell_back, embedded, unnamed):
        record.started = T0
    store.add([usage_row(r) for r in (chat, fell_back, embedded, unnamed, chat)], [])
    query = everything(("endpoint", "served_model"))
    shown = answer_json(query, store.query(query))
    assert [(r["endpoint"], r["served_model"], r["requests"]) for r in shown["rows"]] == [
        ("chat_completions", "opus", 2), ("embeddings", "embed-1", 1), ("messages", "sonnet", 1),
        ("responses", "opus", 1)]
    by_model = store.query(everything(("model", "served_model"))).rows
    assert [(r["model"], r["served_model"], r["requests"]) for r in by_model] == [
        ("embed-1", "embed-1", 1), ("opus", "opus", 3), ("opus", "sonnet", 1)]
    lines = list(csv.DictReader(io.StringIO(answer_csv(query, store.query(query)))))
    assert [(r["endpoint"], r["served_model"]) for r in lines] == [
        ("chat_completions", "opus"), ("embeddings", "embed-1"), ("messages", "sonnet"), ("responses", "opus")]
    assert parse_query({"group_by": "endpoint,served_model"}, now=T0)[0].group_by == ("endpoint", "served_model")


def test_the_recent_list_says_the_endpoint_and_the_model_that_served(store: UsageStore) -> None:
    record = RequestRecord("r1", "alice", "messages", "opus", False, endpoint="messages", served_model="sonnet")
    plain = RequestRecord("r2", "alice", "chat_completions", "gpt-4o", False, endpoint="embeddings")
    store.add([], [recent_entry(record), recent_entry(plain)])
    newest, older = store.recent(2)
    assert (newest.endpoint, newest.served_model) == ("embeddings", None)
    assert (entry_json(older)["endpoint"], entry_json(older)["served_model"]) == ("messages", "sonnet")
    assert entry_json(newest)["served_model"] is None  # no fallback: null
    before = entry(1)  # an entry from before the endpoint was kept: its protocol's
    assert before.endpoint is None and entry_json(before)["endpoint"] == "messages"
