"""The layout of the `state_path` SQLite file, and the one way it is created and brought up to date.

Owns every table of the state file — the pool's account and proxy states (proxy/pool/store.py),
usage and its cost (proxy/ops/usage_store.py), client key limits (proxy/limits/store.py), USD
budgets (proxy/budgets/store.py), conversation affinity (proxy/pool/affinity.py), runtime keys and
the audit log (proxy/keys/sqlite_store.py) — as numbered
migrations, and `schema_migrations`, which records the ones applied. `migrate` runs in one process
before any worker exists (gunicorn's master, at start: proxy.serving.master; `llm-proxy state
migrate`): it creates the file (owner-only: runtime accounts keep their keys in it), switches it to
WAL, and applies in one transaction the migrations the file lacks. Workers never run DDL or
`PRAGMA journal_mode`; they only open the file (proxy/state/sqlite.py), which checks it is at
`CURRENT_VERSION` first — so workers starting at the same moment have nothing to race over.

A migration's SQL is frozen text: once released, it is never edited — a change to a table is a new
migration appended to `MIGRATIONS` (an `ALTER TABLE`, a new table), so a file written by any
earlier version is brought forward step by step. Migration 1 is the layout every store created for
itself before this module existed (`IF NOT EXISTS` throughout), so such a file migrates in place.
tests/unit/test_state_schema.py holds the stores to these columns.

Waiting: another process may hold the file's write lock when the proxy starts — a backup, a
`state export`, a second instance starting on the same file. SQLite then answers "database is
locked", sometimes at once (switching to WAL, or upgrading a read to a write, does not wait in its
busy handler), so `migrate` retries every `RETRY_EVERY` seconds, telling `on_wait` at once and then
every `SAY_EVERY` seconds, until `wait` seconds have passed. Pure stdlib: the master imports it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

# (version, what it does, SQL). Append only; never edit a released one.
MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (1, "account and proxy states, usage, key limits, conversation affinity", """
CREATE TABLE IF NOT EXISTS accounts (
    upstream TEXT NOT NULL, id TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'active', until REAL, reason TEXT, since REAL, balance REAL,
    requests INTEGER NOT NULL DEFAULT 0, failures TEXT NOT NULL DEFAULT '{}',
    tokens_in INTEGER NOT NULL DEFAULT 0, tokens_out INTEGER NOT NULL DEFAULT 0, last_used REAL NOT NULL DEFAULT 0,
    runtime TEXT, removed INTEGER NOT NULL DEFAULT 0, version INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (upstream, id));
CREATE TABLE IF NOT EXISTS proxies (
    upstream TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'ok', until REAL, reason TEXT, since REAL,
    failures INTEGER NOT NULL DEFAULT 0, version INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (upstream, id));
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value);
CREATE TABLE IF NOT EXISTS usage_minutes (
    minute INTEGER NOT NULL,
    client_key TEXT NOT NULL, client_protocol TEXT NOT NULL, model TEXT NOT NULL, upstream_model TEXT NOT NULL,
    upstream TEXT NOT NULL, account TEXT NOT NULL, stream INTEGER NOT NULL, outcome TEXT NOT NULL,
    status INTEGER NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0, errors INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cached_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    first_byte_ms_sum INTEGER NOT NULL DEFAULT 0, first_byte_count INTEGER NOT NULL DEFAULT 0,
    duration_ms_sum INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, client_key, client_protocol, model, upstream_model, upstream, account, stream, outcome,
                 status)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS recent_requests (
    id INTEGER PRIMARY KEY,
    request_id, time, client_key, client_protocol, model, upstream_model, upstream, account, stream, status, outcome,
    attempts, first_byte_ms, duration_ms, input_tokens, output_tokens);
CREATE TABLE IF NOT EXISTS key_limit_usage (
    key TEXT NOT NULL, name TEXT NOT NULL, used REAL NOT NULL, stamp REAL NOT NULL, PRIMARY KEY (key, name));
CREATE TABLE IF NOT EXISTS key_limit_leases (
    key TEXT NOT NULL, lease TEXT NOT NULL, expires REAL NOT NULL, PRIMARY KEY (key, lease));
CREATE TABLE IF NOT EXISTS conversation_affinity (
    upstream TEXT NOT NULL, conversation TEXT NOT NULL, account TEXT NOT NULL, expires REAL NOT NULL,
    PRIMARY KEY (upstream, conversation));
"""),
    (2, "the client's address in the recent-requests list", """
ALTER TABLE recent_requests ADD COLUMN client_address TEXT;
"""),
    # The price version is a dimension (part of the key), which SQLite cannot add to a primary key
    # in place: the table is copied into a new one, every old row under price version ''.
    (3, "what requests cost: usage by price version with cost, unknown-cost and cache-saving counters; "
        "the cost in the recent-requests list", """
CREATE TABLE usage_minutes_v3 (
    minute INTEGER NOT NULL,
    client_key TEXT NOT NULL, client_protocol TEXT NOT NULL, model TEXT NOT NULL, upstream_model TEXT NOT NULL,
    upstream TEXT NOT NULL, account TEXT NOT NULL, stream INTEGER NOT NULL, outcome TEXT NOT NULL,
    status INTEGER NOT NULL, price_version TEXT NOT NULL DEFAULT '',
    requests INTEGER NOT NULL DEFAULT 0, errors INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cached_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros INTEGER NOT NULL DEFAULT 0, cost_unknown_requests INTEGER NOT NULL DEFAULT 0,
    cache_saved_micros INTEGER NOT NULL DEFAULT 0,
    first_byte_ms_sum INTEGER NOT NULL DEFAULT 0, first_byte_count INTEGER NOT NULL DEFAULT 0,
    duration_ms_sum INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, client_key, client_protocol, model, upstream_model, upstream, account, stream, outcome,
                 status, price_version)) WITHOUT ROWID;
INSERT INTO usage_minutes_v3 (minute, client_key, client_protocol, model, upstream_model, upstream, account, stream,
    outcome, status, requests, errors, input_tokens, output_tokens, cached_tokens, cache_write_tokens,
    reasoning_tokens, first_byte_ms_sum, first_byte_count, duration_ms_sum)
SELECT minute, client_key, client_protocol, model, upstream_model, upstream, account, stream, outcome, status,
    requests, errors, input_tokens, output_tokens, cached_tokens, cache_write_tokens, reasoning_tokens,
    first_byte_ms_sum, first_byte_count, duration_ms_sum FROM usage_minutes;
DROP TABLE usage_minutes;
ALTER TABLE usage_minutes_v3 RENAME TO usage_minutes;
ALTER TABLE recent_requests ADD COLUMN cost_micros INTEGER;
"""),
    (4, "USD budgets: what each key and group spent per window, and the reservations of requests in flight", """
CREATE TABLE budget_spend (
    subject TEXT NOT NULL, window TEXT NOT NULL, period TEXT NOT NULL, spent INTEGER NOT NULL,
    PRIMARY KEY (subject, window, period)) WITHOUT ROWID;
CREATE TABLE budget_holds (
    lease TEXT NOT NULL, subject TEXT NOT NULL, window TEXT NOT NULL, period TEXT NOT NULL, amount INTEGER NOT NULL,
    expires REAL NOT NULL, PRIMARY KEY (subject, window, lease)) WITHOUT ROWID;
"""),
    (5, "USD budgets: what is reserved kept beside what is spent, and per worker (a lease each) for its expiry", """
ALTER TABLE budget_spend ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
-- the holds left by the workers of the last run (none runs while the file migrates): charged in full
INSERT INTO budget_spend (subject, window, period, spent)
    SELECT subject, window, period, SUM(amount) FROM budget_holds WHERE true GROUP BY subject, window, period
    ON CONFLICT (subject, window, period) DO UPDATE SET spent = spent + excluded.spent;
DROP TABLE budget_holds;
CREATE TABLE budget_workers (worker TEXT NOT NULL PRIMARY KEY, expires REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE budget_worker_holds (
    worker TEXT NOT NULL, subject TEXT NOT NULL, window TEXT NOT NULL, period TEXT NOT NULL, held INTEGER NOT NULL,
    PRIMARY KEY (worker, subject, window, period)) WITHOUT ROWID;
"""),
    # Structured fields (secrets, globs, limits, budgets, metadata, an audit entry's before/after)
    # are JSON text: read and written whole, never queried by their parts.
    (6, "Runtime keys: client keys, key groups and admin keys made at runtime, the overlay on the config's keys, "
        "when keys were last used, idempotency records, the audit log and the key store's version", """
CREATE TABLE runtime_keys (
    name TEXT NOT NULL PRIMARY KEY, secrets TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    models TEXT, limits TEXT, budget TEXT, groups TEXT NOT NULL, metadata TEXT NOT NULL,
    disabled INTEGER NOT NULL, expires_at REAL) WITHOUT ROWID;
CREATE TABLE runtime_key_groups (
    name TEXT NOT NULL PRIMARY KEY, keys TEXT NOT NULL, budget TEXT, created_at REAL NOT NULL,
    updated_at REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE runtime_admin_keys (
    name TEXT NOT NULL PRIMARY KEY, secret TEXT NOT NULL, role TEXT NOT NULL, created_at REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE key_overlays (name TEXT NOT NULL PRIMARY KEY, disabled INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE key_last_used (name TEXT NOT NULL PRIMARY KEY, at REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE key_idempotency (
    actor TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, status INTEGER NOT NULL,
    body_sealed BLOB NOT NULL, expires REAL NOT NULL, PRIMARY KEY (actor, key)) WITHOUT ROWID;
CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL,
    before TEXT, after TEXT, request_id TEXT, client TEXT);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE TABLE key_store_version (one INTEGER NOT NULL PRIMARY KEY CHECK (one = 1), version INTEGER NOT NULL);
INSERT INTO key_store_version (one, version) VALUES (1, 0);
"""),
    # The endpoint and the served model are dimensions (part of the key, which the upsert's ON
    # CONFLICT names): the table is copied into a new one, every old row under its client protocol
    # as its endpoint and its model as the model that served it (no fallback existed before).
    (7, "usage and the recent requests by the endpoint the client called and the model that served it", """
CREATE TABLE usage_minutes_v7 (
    minute INTEGER NOT NULL,
    client_key TEXT NOT NULL, client_protocol TEXT NOT NULL, model TEXT NOT NULL, upstream_model TEXT NOT NULL,
    upstream TEXT NOT NULL, account TEXT NOT NULL, stream INTEGER NOT NULL, outcome TEXT NOT NULL,
    status INTEGER NOT NULL, price_version TEXT NOT NULL DEFAULT '', endpoint TEXT NOT NULL DEFAULT '',
    served_model TEXT NOT NULL DEFAULT '',
    requests INTEGER NOT NULL DEFAULT 0, errors INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cached_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros INTEGER NOT NULL DEFAULT 0, cost_unknown_requests INTEGER NOT NULL DEFAULT 0,
    cache_saved_micros INTEGER NOT NULL DEFAULT 0,
    first_byte_ms_sum INTEGER NOT NULL DEFAULT 0, first_byte_count INTEGER NOT NULL DEFAULT 0,
    duration_ms_sum INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, client_key, client_protocol, model, upstream_model, upstream, account, stream, outcome,
                 status, price_version, endpoint, served_model)) WITHOUT ROWID;
INSERT INTO usage_minutes_v7 (minute, client_key, client_protocol, model, upstream_model, upstream, account, stream,
    outcome, status, price_version, endpoint, served_model, requests, errors, input_tokens, output_tokens,
    cached_tokens, cache_write_tokens, reasoning_tokens, cost_micros, cost_unknown_requests, cache_saved_micros,
    first_byte_ms_sum, first_byte_count, duration_ms_sum)
SELECT minute, client_key, client_protocol, model, upstream_model, upstream, account, stream, outcome, status,
    price_version, client_protocol, model, requests, errors, input_tokens, output_tokens, cached_tokens,
    cache_write_tokens, reasoning_tokens, cost_micros, cost_unknown_requests, cache_saved_micros,
    first_byte_ms_sum, first_byte_count, duration_ms_sum FROM usage_minutes;
DROP TABLE usage_minutes;
ALTER TABLE usage_minutes_v7 RENAME TO usage_minutes;
ALTER TABLE recent_requests ADD COLUMN endpoint TEXT;
ALTER TABLE recent_requests ADD COLUMN served_model TEXT;
UPDATE recent_requests SET endpoint = client_protocol;
"""),
)
CURRENT_VERSION = MIGRATIONS[-1][0]

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL NOT NULL)"""

RETRY_EVERY = 0.05  # seconds between two attempts while another process holds the file
SAY_EVERY = 5.0  # seconds between two "still waiting" calls of on_wait
DEFAULT_WAIT = 600.0  # seconds migrate waits for another process's lock before giving up


class StateFileError(Exception):
    """The state file cannot be used as it is: the message says why and what to do. `fatal`: no
    retry can help (an operator must act), so a start stops on it."""

    def __init__(self, message: str, fatal: bool = True) -> None:
        super().__init__(message)
        self.fatal = fatal


@dataclass(frozen=True)
class Report:
    """What `check` found."""

    path: str
    exists: bool
    version: int  # 0: no schema_migrations table (a new file, or one from before versions)
    journal_mode: str
    integrity: str  # "ok", or SQLite's first complaint
    size_bytes: int

    @property
    def current(self) -> bool:
        return self.version == CURRENT_VERSION

    @property
    def problems(self) -> list[str]:
        found = []
        if not self.exists:
            found.append("the file does not exist (the proxy creates it at start; `llm-proxy state migrate` now)")
        elif self.version < CURRENT_VERSION:
            found.append(f"schema version {self.version}, this llm-proxy uses {CURRENT_VERSION}: "
                         "run `llm-proxy state migrate` (or start the proxy, which migrates it)")
        elif self.version > CURRENT_VERSION:
            found.append(f"schema version {self.version} is newer than this llm-proxy knows ({CURRENT_VERSION}): "
                         "a newer llm-proxy wrote it; upgrade, or point state_path at another file")
        if self.exists and self.journal_mode != "wal":
            found.append(f"journal mode {self.journal_mode!r}, not 'wal' (`llm-proxy state migrate` sets it)")
        if self.integrity != "ok":
            found.append(f"integrity check: {self.integrity}")
        return found


def is_locked(exc: BaseException) -> bool:
    """SQLite's answer while another connection holds a lock it needs."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def applied_version(db: sqlite3.Connection) -> int:
    """The newest migration recorded in the file; 0 for a file without the table."""
    found = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_migrations'").fetchone()
    if found is None:
        return 0
    row = db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0)


def migrate(path: str, wait: float = DEFAULT_WAIT, on_wait: Callable[[float], None] | None = None,
            clock: Callable[[], float] = time.monotonic) -> tuple[int, int]:
    """Create the file if missing, switch it to WAL and apply the migrations it lacks. Returns the
    version found and the version now. Raises StateFileError for a file that cannot be used
    (another program's file, a directory that does not exist, a newer schema) or a lock still held
    after `wait` seconds."""
    started = clock()
    said: float | None = None
    while True:
        try:
            return _migrate_once(path)
        except sqlite3.OperationalError as exc:
            if not is_locked(exc):
                raise StateFileError(_explain(path, exc)) from None
            now = clock()
            if now - started >= wait:
                raise StateFileError(f"{path}: another process has held the file's lock for {now - started:.0f}s "
                                     "(a backup, a `state export`, another proxy on the same file?); stop it or "
                                     "point state_path at another file") from None
            if on_wait is not None and (said is None or now - said >= SAY_EVERY):
                said = now
                on_wait(now - started)
            time.sleep(RETRY_EVERY)
        except sqlite3.DatabaseError as exc:  # not a database at all, or a damaged one
            raise StateFileError(_explain(path, exc)) from None


def _migrate_once(path: str) -> tuple[int, int]:
    if not os.path.exists(path):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        except OSError as exc:
            raise StateFileError(f"{path}: cannot create the state file ({exc.strerror}): does its directory "
                                 "exist, and may this user write there?") from None
    # A short busy timeout: the caller's loop does the waiting, and can say that it waits.
    db = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    try:
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
        found = applied_version(db)
        if mode == "wal" and found == CURRENT_VERSION:  # the usual start: nothing to write
            return found, found
        if mode != "wal":
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":  # SQLite answers the mode it is in when it could not switch
                raise sqlite3.OperationalError("database is locked (could not switch to WAL)")
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(_VERSION_TABLE)
            found = applied_version(db)
            if found > CURRENT_VERSION:
                raise StateFileError(f"{path}: schema version {found} is newer than this llm-proxy knows "
                                     f"({CURRENT_VERSION}): a newer llm-proxy wrote it; upgrade, or point "
                                     "state_path at another file")
            for version, description, sql in MIGRATIONS:
                if version > found:
                    for statement in _statements(sql):
                        db.execute(statement)
                    db.execute("INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, ?, ?)",
                               (version, description, time.time()))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return found, CURRENT_VERSION
    finally:
        db.close()


def _statements(sql: str) -> list[str]:
    """A migration's statements, one by one: executescript would commit the transaction first."""
    return [s.strip() for s in sql.split(";") if s.strip()]


def _read_only_filesystem(path: str) -> bool:
    try:
        return bool(os.statvfs(os.path.dirname(os.path.abspath(path))).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check(path: str) -> Report:
    """What the file is: its schema version, journal mode, integrity, size. Reads only."""
    if not os.path.exists(path):
        return Report(path, False, 0, "", "ok", 0)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30, isolation_level=None)
        try:
            version = applied_version(db)
            mode = db.execute("PRAGMA journal_mode").fetchone()[0]
            rows = db.execute("PRAGMA quick_check").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise StateFileError(_explain(path, exc)) from None
    integrity = "ok" if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows[:3])
    return Report(path, True, version, mode, integrity, os.path.getsize(path))


def _explain(path: str, exc: BaseException) -> str:
    text = str(exc)
    if _read_only_filesystem(path):
        return (f"{path}: the filesystem holding the state file is mounted read-only ({text}): the proxy writes "
                "to it; remount it read-write or point state_path at a writable directory")
    if "unable to open" in text:
        return f"{path}: cannot open the state file ({text}): does its directory exist, and may this user write there?"
    if "not a database" in text or "malformed" in text:
        return (f"{path}: not a usable SQLite database ({text}): point state_path at another file, or restore this "
                "one from a backup")
    if "readonly" in text or "read-only" in text:
        return f"{path}: the state file is read-only ({text}): the proxy writes to it; fix its permissions or mount"
    if "disk is full" in text or "disk I/O" in text:
        return f"{path}: the state file cannot be written ({text}): free space on its filesystem"
    return f"{path}: {text}"
