"""The state file's schema and how it is opened (proxy/state/schema.py, proxy/state/sqlite.py):
created and migrated once, before workers; a file from before versions migrated in place with
its data; a newer file refused; a lock held by another process waited out and said; workers only
open a file that is current; the stores' columns are the migrations' columns; a write the disk
refuses is named for what it is."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest

from proxy.keys.model import AuditEntry, RuntimeKey, Snapshot
from proxy.keys.sqlite_store import KEY_COLUMNS, SQLiteKeyStore
from proxy.ops.usage_store import COUNTERS, DIMENSIONS, TIMINGS, RecentEntry
from proxy.state import schema
from proxy.state.schema import CURRENT_VERSION, StateFileError
from proxy.state.sqlite import StateFile, unwritable

# The tables every store created for itself before the state file had versions (the first
# release's layout, which migration 1 must take in place).
BEFORE_VERSIONS = """
CREATE TABLE accounts (upstream TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'active', until REAL,
    reason TEXT, since REAL, balance REAL, requests INTEGER NOT NULL DEFAULT 0, failures TEXT NOT NULL DEFAULT '{}',
    tokens_in INTEGER NOT NULL DEFAULT 0, tokens_out INTEGER NOT NULL DEFAULT 0, last_used REAL NOT NULL DEFAULT 0,
    runtime TEXT, removed INTEGER NOT NULL DEFAULT 0, version INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (upstream, id));
CREATE TABLE key_limit_usage (key TEXT NOT NULL, name TEXT NOT NULL, used REAL NOT NULL, stamp REAL NOT NULL,
    PRIMARY KEY (key, name));
INSERT INTO accounts (upstream, id, status, requests) VALUES ('main', 'a1', 'disabled', 41);
INSERT INTO key_limit_usage VALUES ('alice', 'tokens_per_day', 1200, 20000);
"""


def columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def left_by_release(monkeypatch: pytest.MonkeyPatch, path: str, version: int) -> None:
    """Make the state file at `path` as a release whose last migration was `version` left it."""
    with monkeypatch.context() as patched:
        patched.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:version])
        patched.setattr(schema, "CURRENT_VERSION", version)
        assert schema.migrate(path) == (0, version)


def test_a_new_file_is_created_owner_only_in_wal_mode_at_the_current_version(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    assert schema.migrate(path) == (0, CURRENT_VERSION)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"  # runtime accounts keep their keys in it
    report = schema.check(path)
    assert (report.version, report.journal_mode, report.integrity, report.problems) == (
        CURRENT_VERSION, "wal", "ok", [])
    assert schema.migrate(path) == (CURRENT_VERSION, CURRENT_VERSION)  # again: nothing to do


def test_a_file_from_before_versions_is_migrated_in_place_with_its_data(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    with sqlite3.connect(path) as db:
        db.executescript(BEFORE_VERSIONS)
    assert schema.check(path).problems  # version 0, not WAL: it says what to run
    assert schema.migrate(path) == (0, CURRENT_VERSION)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT status, requests FROM accounts").fetchall() == [("disabled", 41)]
        assert db.execute("SELECT used FROM key_limit_usage").fetchall() == [(1200.0,)]
        assert db.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall() == [
            (version,) for version, _, _ in schema.MIGRATIONS]


def test_a_version_1_file_gains_the_client_address_keeping_its_recent_requests(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 2 adds `client_address` to the recent-requests list; entries written before it
    read back with None."""
    from proxy.ops.sqlite_usage_store import SQLiteUsageStore

    path = str(tmp_path / "state.db")
    left_by_release(monkeypatch, path, 1)  # the file as the release with migration 1 only left it
    with sqlite3.connect(path) as db:
        assert "client_address" not in columns(db, "recent_requests")
        db.execute("INSERT INTO recent_requests (request_id, time, client_key, client_protocol, model, upstream_model,"
                   " upstream, account, stream, status, outcome, attempts, first_byte_ms, duration_ms, input_tokens,"
                   " output_tokens) VALUES ('old', 1.0, 'alice', 'messages', 'm', 'm', 'main', 'a1', 0, 200, 'ok',"
                   " 1, 5, 9, 3, 4)")
    assert schema.migrate(path) == (1, CURRENT_VERSION)
    state = StateFile.open(path)
    try:
        store = SQLiteUsageStore(state)
        new = RecentEntry("new", 2.0, "bob", "messages", "m", None, None, None, True, 200, "ok", 1, None, None, 0, 0,
                          client_address="203.0.113.7")
        store.add([], [new])
        store.add([], [])  # the buffered write lands
        got = store.recent(10)
        assert [(e.request_id, e.client_address) for e in got] == [("new", "203.0.113.7"), ("old", None)]
        assert (got[1].client_key, got[1].input_tokens, got[1].output_tokens) == ("alice", 3, 4)
    finally:
        state.close()


def test_a_version_2_file_keeps_its_usage_rows_under_no_price_version_and_gains_the_cost_columns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 3 makes the price version part of a usage row's key (the table is copied) and adds
    the cost counters and the recent entries' cost; rows from before read back with price version ''
    and no cost, and a new row of the same minute and dimensions is a row of its own."""
    from proxy.ops.sqlite_usage_store import SQLiteUsageStore
    from proxy.ops.usage_store import UsageQuery, UsageRow

    path = str(tmp_path / "state.db")
    left_by_release(monkeypatch, path, 2)  # the file as the release with migrations 1 and 2 left it
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO usage_minutes (minute, client_key, client_protocol, model, upstream_model, upstream,"
                   " account, stream, outcome, status, requests, input_tokens, output_tokens) VALUES"
                   " (60, 'alice', 'messages', 'm', 'm', 'main', 'a1', 0, 'ok', 200, 4, 100, 40)")
    assert schema.migrate(path) == (2, CURRENT_VERSION)
    state = StateFile.open(path)
    try:
        store = SQLiteUsageStore(state)
        new = UsageRow(60, "alice", "messages", "m", "m", "main", "a1", False, "ok", 200, "config", requests=1,
                       input_tokens=10, output_tokens=2, cost_micros=70)
        store.add([new], [])
        rows = store.query(UsageQuery(0, 120, group_by=("price_version",))).rows
        assert [(r["price_version"], r["requests"], r["input_tokens"], r["cost_micros"]) for r in rows] == [
            ("", 4, 100, 0), ("config", 1, 10, 70)]
    finally:
        state.close()


def test_a_file_written_by_a_newer_version_is_refused_saying_so(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    schema.migrate(path)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_migrations VALUES (?, 'from the future', 0)", (CURRENT_VERSION + 1,))
    with pytest.raises(StateFileError, match="newer than this llm-proxy knows"):
        schema.migrate(path)
    with pytest.raises(StateFileError, match="a newer llm-proxy wrote it"):
        StateFile.open(path)


def test_a_worker_opens_only_a_migrated_file_and_runs_no_ddl(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    Path(path).touch()
    with pytest.raises(StateFileError, match="llm-proxy state migrate"):
        StateFile.open(path)
    with sqlite3.connect(path) as db:  # it created nothing
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == []
    schema.migrate(path)
    opened = StateFile.open(path)
    try:
        with opened.write_transaction() as db:
            db.execute("INSERT INTO meta (key, value) VALUES ('x', 1)")
        assert opened.health.up
    finally:
        opened.close()


def test_not_a_database_and_a_missing_directory_are_clear_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite, it is a text file of forty-odd bytes" * 10)
    with pytest.raises(StateFileError, match="not a usable SQLite database"):
        schema.migrate(str(junk))
    with pytest.raises(StateFileError, match="does its directory exist"):
        schema.migrate(str(tmp_path / "no-such-dir" / "state.db"))


HOLD_LOCK = textwrap.dedent("""
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")  # as a backup or a second instance starting would
    print("locked", flush=True)
    sys.stdin.readline()  # until the test says
    db.execute("COMMIT")
""")


def test_a_lock_held_by_another_process_is_waited_out_and_said(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    Path(path).touch()  # the empty file, as a new install has it
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "locked"
        said: list[float] = []

        def waiting(waited: float) -> None:
            said.append(waited)
            holder.stdin.write("release\n")  # the holder lets go once the wait has been said
            holder.stdin.flush()

        assert schema.migrate(path, on_wait=waiting) == (0, CURRENT_VERSION)
        assert said  # it waited, and said so
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_held_past_the_wait_is_an_error_naming_the_cause(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    Path(path).touch()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StateFileError, match="another process has held the file's lock"):
            schema.migrate(path, wait=0.3)
    finally:
        holder.kill()
        holder.wait()


def test_the_stores_columns_are_the_migrations_columns(tmp_path: Path) -> None:
    """The usage store builds its statements from its dimension and counter names; the migrations
    are frozen text. They must agree, or a write fails at run time."""
    path = str(tmp_path / "state.db")
    schema.migrate(path)
    with sqlite3.connect(path) as db:
        assert columns(db, "usage_minutes") == ["minute", *DIMENSIONS, *COUNTERS, *TIMINGS]
        assert columns(db, "recent_requests") == ["id", *(f.name for f in fields(RecentEntry))]
        # the key store names its columns as the model names its fields
        assert columns(db, "runtime_keys") == [f.name for f in fields(RuntimeKey)] == list(KEY_COLUMNS)
        assert columns(db, "audit_log") == ["id", *(f.name for f in fields(AuditEntry))]


def test_a_version_5_file_gains_an_empty_key_store_keeping_its_budgets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 6 adds the runtime keys' tables: a file from before reads back with no runtime key,
    no audit entry, at version 0 — and what it held stays."""
    path = str(tmp_path / "state.db")
    left_by_release(monkeypatch, path, 5)  # the file as the release with migrations 1 to 5 left it
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO budget_spend (subject, window, period, spent) VALUES ('key:a', 'usd_total', '', 7)")
    assert schema.migrate(path) == (5, CURRENT_VERSION)
    state = StateFile.open(path)
    try:
        store = SQLiteKeyStore(state)
        assert store.snapshot() == Snapshot(version=0) and store.audit() == []
    finally:
        state.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT spent FROM budget_spend").fetchall() == [(7,)]


def test_a_version_6_file_keeps_its_usage_under_its_protocol_as_endpoint_and_its_model_as_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 7 makes the endpoint and the served model part of a usage row's key (the table is
    copied): a row from before reads back with its client protocol as its endpoint and its model as
    the model that served; a new row of the same figures adds to it (the upsert's conflict target is
    the new key), one that a fallback served is a row of its own. Recent entries gain both fields."""
    from proxy.ops.sqlite_usage_store import SQLiteUsageStore
    from proxy.ops.usage_store import UsageQuery, UsageRow

    path = str(tmp_path / "state.db")
    left_by_release(monkeypatch, path, 6)  # the file as the release with migrations 1 to 6 left it
    with sqlite3.connect(path) as db:
        assert "endpoint" not in columns(db, "usage_minutes")
        db.execute("INSERT INTO usage_minutes (minute, client_key, client_protocol, model, upstream_model, upstream,"
                   " account, stream, outcome, status, price_version, requests, input_tokens, cost_micros) VALUES"
                   " (60, 'alice', 'messages', 'opus', 'opus-up', 'main', 'a1', 0, 'ok', 200, 'config', 4, 100, 70),"
                   " (60, 'alice', 'chat_completions', 'gpt', 'gpt', 'main', 'a1', 1, 'ok', 200, '', 2, 10, 0)")
        db.execute("INSERT INTO recent_requests (request_id, time, client_key, client_protocol, model, upstream_model,"
                   " upstream, account, stream, status, outcome, attempts, first_byte_ms, duration_ms, input_tokens,"
                   " output_tokens) VALUES ('old', 1.0, 'alice', 'messages', 'opus', 'opus-up', 'main', 'a1', 0,"
                   " 200, 'ok', 1, 5, 9, 3, 4)")
    assert schema.migrate(path) == (6, CURRENT_VERSION)
    state = StateFile.open(path)
    try:
        store = SQLiteUsageStore(state)
        same = UsageRow(60, "alice", "messages", "opus", "opus-up", "main", "a1", False, "ok", 200, "config",
                        "messages", "opus", requests=1, input_tokens=5, cost_micros=3)
        fell_back = UsageRow(60, "alice", "messages", "opus", "sonnet-up", "main", "a1", False, "ok", 200, "config",
                             "messages", "sonnet", requests=1)
        store.add([same, fell_back], [])
        rows = store.query(UsageQuery(0, 120, group_by=("endpoint", "served_model", "model"))).rows
        assert [(r["endpoint"], r["served_model"], r["model"], r["requests"], r["input_tokens"], r["cost_micros"])
                for r in rows] == [("chat_completions", "gpt", "gpt", 2, 10, 0), ("messages", "opus", "opus", 5, 105, 73),
                                   ("messages", "sonnet", "opus", 1, 0, 0)]
        (old,) = store.recent(10)
        assert (old.request_id, old.endpoint, old.served_model, old.input_tokens) == ("old", "messages", None, 3)
    finally:
        state.close()
    with sqlite3.connect(path) as db:  # one row per minute and key: the copy kept no duplicate
        assert db.execute("SELECT COUNT(*) FROM usage_minutes").fetchone() == (3,)


@pytest.mark.parametrize("error, cause", [
    (sqlite3.OperationalError("database or disk is full"), "disk is full"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "read-only"),
    (OSError(errno.ENOSPC, "No space left on device"), "disk is full"),
    (OSError(errno.EROFS, "Read-only file system"), "read-only"),
])
def test_a_write_the_disk_refuses_is_named_for_what_it_is(error: BaseException, cause: str) -> None:
    assert cause in (unwritable(error) or "")


def test_other_errors_are_not_taken_for_a_full_disk() -> None:
    assert unwritable(sqlite3.OperationalError("no such table: x")) is None
    assert unwritable(OSError(errno.ECONNREFUSED, "refused")) is None


def test_a_full_disk_reported_by_sqlite_itself_is_recognised(tmp_path: Path) -> None:
    """SQLITE_FULL as SQLite raises it (its error code, not only its words): a file capped at
    its current size by max_page_count refuses the next page."""
    path = str(tmp_path / "state.db")
    schema.migrate(path)
    db = sqlite3.connect(path, isolation_level=None)
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(sqlite3.OperationalError) as raised:
        db.execute("INSERT INTO meta (key, value) VALUES ('big', ?)", ("x" * 100_000,))
    db.close()
    assert unwritable(raised.value) == "the state file's disk is full"


class ReadOnlyWhenAsked(StateFile):
    """The state file with a switch: while `read_only`, every connection it gives refuses writes with
    SQLite's own SQLITE_READONLY (`PRAGMA query_only`), as a disk remounted read-only would."""

    read_only = False

    def connect(self, busy_timeout: float = 30.0) -> sqlite3.Connection:
        db = super().connect(busy_timeout)
        db.execute(f"PRAGMA query_only={int(self.read_only)}")
        return db


def test_a_read_only_file_keeps_usage_and_pool_changes_and_writes_them_later(tmp_path: Path) -> None:
    from proxy.ops.sqlite_usage_store import SQLiteUsageStore
    from proxy.ops.usage_store import UsageQuery, UsageRow
    from proxy.pool.store import AccountRecord, CounterDelta, SQLiteStore

    path = str(tmp_path / "state.db")
    schema.migrate(path)
    state = ReadOnlyWhenAsked(path)
    usage, pool = SQLiteUsageStore(state), SQLiteStore(state)
    row = UsageRow(60, "alice", "chat_completions", "m", "m", "main", "a1", False, "ok", 200, requests=1)
    usage.add([row], [])
    state.read_only = True
    for connection in (usage._writer, usage._at_once):
        connection.execute("PRAGMA query_only=1")
    usage.add([row, row], [])
    pool.write([AccountRecord("main", "a1", status="cooling", until=1e12)], [CounterDelta("main", "a1", requests=3)])
    assert not state.health.up and state.health.reason == "the state file is read-only"
    assert usage.query(UsageQuery(0, 120)).totals["requests"] == 1  # the file still reads
    assert not usage.try_add([row], [])  # nothing at once while something is kept
    state.read_only = False
    for connection in (usage._writer, usage._at_once):
        connection.execute("PRAGMA query_only=0")
    state.health._next_try = 0.0  # the backoff would let the next write through within seconds
    usage.add([], [])
    pool.write([], [])
    assert state.health.up
    assert usage.query(UsageQuery(0, 120)).totals["requests"] == 3
    (record,) = pool.load()
    assert (record.status, record.requests) == ("cooling", 3)
    state.close()


def test_readiness_says_why_without_naming_where() -> None:
    """/readyz needs no key: the state file's reason is said as it is; a Redis error, which names
    the server's address, only as "does not answer"."""
    from proxy.state.health import StoreHealth

    disk = StoreHealth("sqlite")
    disk.failed("the state file's disk is full")
    assert disk.public()["state_reason"] == "the state file's disk is full" and disk.public()["state"] == "degraded"
    redis = StoreHealth("redis")
    redis.failed(ConnectionError("Error 111 connecting to 10.0.0.9:6379. Connection refused."))
    assert redis.public()["state_reason"] == "the shared Redis does not answer"
    assert "10.0.0.9" not in str(redis.public())
    redis.ok()
    assert redis.public() == {"state": "ok", "state_backend": "redis"}
