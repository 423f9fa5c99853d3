"""Runtime keys in the `state_path` file (one host): the `KeyStore` (proxy/keys/store.py) over the
tables of migration 6 (proxy/state/schema.py), shared by the host's workers.

Owns those tables' reading and writing: `commit` is one `BEGIN IMMEDIATE` transaction — the new
names checked, the change applied, the audit entry appended, the idempotency record kept and the
version counter raised — so every worker sees a change whole or not at all, and a `NameTaken`
rolls back with nothing written. `snapshot` reads every table inside one read transaction (one
version's state, whatever commits meanwhile). `touch` keeps the later time and leaves the version
alone: workers poll the version to rebuild their tables, and a last-used time changes none.
SQLite calls block (`blocking` is True): callers run them on a real thread. Pure of Flask and gevent.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from proxy.keys import records
from proxy.keys.model import (
    AuditEntry,
    Change,
    Idempotent,
    NameTaken,
    Overlay,
    RuntimeAdmin,
    RuntimeGroup,
    RuntimeKey,
    Snapshot,
)
from proxy.state.sqlite import StateFile

KEY_COLUMNS = ("name", "secrets", "created_at", "updated_at", "models", "limits", "budget", "groups", "metadata",
               "disabled", "expires_at")  # runtime_keys, as migration 6 made it
JSON_KEY_COLUMNS = ("secrets", "models", "limits", "budget", "groups", "metadata")
_AUDIT_COLUMNS = "at, actor, action, target, before, after, request_id, client"


class SQLiteKeyStore:
    blocking = True

    def __init__(self, state_file: StateFile) -> None:
        self.file = state_file

    def version(self) -> int:
        with self.file.session() as db:
            return int(db.execute("SELECT version FROM key_store_version").fetchone()[0])

    def snapshot(self) -> Snapshot:
        with self.file.session() as db:
            db.execute("BEGIN")  # every read below sees the same version
            try:
                version = int(db.execute("SELECT version FROM key_store_version").fetchone()[0])
                keys = {k.name: k for k in map(_key, db.execute(f"SELECT {', '.join(KEY_COLUMNS)} "
                                                                "FROM runtime_keys"))}
                groups = {g.name: g for g in map(_group, db.execute(
                    "SELECT name, keys, budget, created_at, updated_at FROM runtime_key_groups"))}
                admins = {a.name: a for a in map(_admin, db.execute(
                    "SELECT name, secret, role, created_at FROM runtime_admin_keys"))}
                overlays = {name: Overlay(name, bool(disabled))
                            for name, disabled in db.execute("SELECT name, disabled FROM key_overlays")}
                last_used = dict(db.execute("SELECT name, at FROM key_last_used").fetchall())
            finally:
                db.execute("COMMIT")
        return Snapshot(version=version, keys=keys, groups=groups, admins=admins, overlays=overlays,
                        last_used=last_used)

    def commit(self, change: Change, audit: AuditEntry, idempotent: Idempotent | None = None) -> int:
        with self.file.write_transaction() as db:
            _check_new(db, change)
            _apply(db, change)
            db.execute(f"INSERT INTO audit_log ({_AUDIT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _audit_row(audit))
            if idempotent is not None:
                db.execute("INSERT OR REPLACE INTO key_idempotency (actor, key, fingerprint, status, body_sealed, "
                           "expires) VALUES (?, ?, ?, ?, ?, ?)",
                           (idempotent.actor, idempotent.key, idempotent.fingerprint, idempotent.status,
                            idempotent.body_sealed, idempotent.expires))
            db.execute("UPDATE key_store_version SET version = version + 1")
            return int(db.execute("SELECT version FROM key_store_version").fetchone()[0])

    def idempotent(self, actor: str, key: str, now: float) -> Idempotent | None:
        with self.file.session() as db:
            row = db.execute("SELECT fingerprint, status, body_sealed, expires FROM key_idempotency "
                             "WHERE actor = ? AND key = ? AND expires > ?", (actor, key, now)).fetchone()
        if row is None:
            return None
        return Idempotent(actor=actor, key=key, fingerprint=row[0], status=int(row[1]), body_sealed=bytes(row[2]),
                          expires=row[3])

    def touch(self, used: Mapping[str, float]) -> None:
        if not used:
            return
        with self.file.write_transaction() as db:
            db.executemany("INSERT INTO key_last_used (name, at) VALUES (?, ?) "
                           "ON CONFLICT (name) DO UPDATE SET at = MAX(at, excluded.at)", list(used.items()))

    def audit(self, since: float | None = None, until: float | None = None, actor: str | None = None,
              target: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        where, args = [], []  # type: list[str], list[Any]
        for clause, value in (("at >= ?", since), ("at < ?", until), ("actor = ?", actor), ("target = ?", target)):
            if value is not None:
                where.append(clause)
                args.append(value)
        sql = f"SELECT {_AUDIT_COLUMNS} FROM audit_log"
        if where:
            sql += " WHERE " + " AND ".join(where)
        # newest first by time; entries of the same instant, the later written first
        sql += " ORDER BY at DESC, id DESC LIMIT ?"
        with self.file.session() as db:
            rows = db.execute(sql, (*args, limit)).fetchall()
        return [AuditEntry(at=r[0], actor=r[1], action=r[2], target=r[3], before=_loads(r[4]), after=_loads(r[5]),
                           request_id=r[6], client=r[7]) for r in rows]

    def purge(self, before: float, now: float) -> int:
        with self.file.write_transaction() as db:
            gone = db.execute("DELETE FROM audit_log WHERE at < ?", (before,)).rowcount
            db.execute("DELETE FROM key_idempotency WHERE expires <= ?", (now,))
        return int(gone)


def _check_new(db: sqlite3.Connection, change: Change) -> None:
    """NameTaken for the first new name the config file or any runtime key, group or admin key uses."""
    taken = set(change.taken)
    for name in (*change.new_keys, *change.new_groups, *change.new_admins):
        if name in taken or db.execute(
                "SELECT 1 FROM runtime_keys WHERE name = ?1 UNION ALL SELECT 1 FROM runtime_key_groups WHERE name = ?1 "
                "UNION ALL SELECT 1 FROM runtime_admin_keys WHERE name = ?1", (name,)).fetchone() is not None:
            raise NameTaken(name)


def _apply(db: sqlite3.Connection, change: Change) -> None:
    # deletions first, then puts: a name in both ends up put, as in the in-memory store
    for table, names in (("runtime_keys", change.delete_keys), ("runtime_key_groups", change.delete_groups),
                         ("runtime_admin_keys", change.delete_admins)):
        db.executemany(f"DELETE FROM {table} WHERE name = ?", [(n,) for n in names])
    db.executemany(f"INSERT OR REPLACE INTO runtime_keys ({', '.join(KEY_COLUMNS)}) "
                   f"VALUES ({', '.join('?' * len(KEY_COLUMNS))})", [_key_row(k) for k in change.put_keys])
    db.executemany("INSERT OR REPLACE INTO runtime_key_groups (name, keys, budget, created_at, updated_at) "
                   "VALUES (?, ?, ?, ?, ?)",
                   [(g.name, records.dumps(list(g.keys)), _dumps(g.budget), g.created_at, g.updated_at)
                    for g in change.put_groups])
    db.executemany("INSERT OR REPLACE INTO runtime_admin_keys (name, secret, role, created_at) VALUES (?, ?, ?, ?)",
                   [(a.name, records.dumps(records.secret_doc(a.secret)), a.role, a.created_at)
                    for a in change.put_admins])
    db.executemany("INSERT OR REPLACE INTO key_overlays (name, disabled) VALUES (?, ?)",
                   [(o.name, int(o.disabled)) for o in change.put_overlays])


def _dumps(value: Any) -> str | None:
    return None if value is None else records.dumps(value)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _key_row(k: RuntimeKey) -> tuple[Any, ...]:
    doc = records.key_doc(k)
    return tuple(_dumps(doc[c]) if c in JSON_KEY_COLUMNS else doc[c] for c in KEY_COLUMNS)


def _key(row: Iterable[Any]) -> RuntimeKey:
    doc = dict(zip(KEY_COLUMNS, row, strict=True))
    return records.key_from({c: _loads(v) if c in JSON_KEY_COLUMNS else v for c, v in doc.items()})


def _group(row: tuple[Any, ...]) -> RuntimeGroup:
    name, keys, budget, created_at, updated_at = row
    return records.group_from({"name": name, "keys": json.loads(keys), "budget": _loads(budget),
                               "created_at": created_at, "updated_at": updated_at})


def _admin(row: tuple[Any, ...]) -> RuntimeAdmin:
    name, secret, role, created_at = row
    return records.admin_from({"name": name, "secret": json.loads(secret), "role": role, "created_at": created_at})


def _audit_row(e: AuditEntry) -> tuple[Any, ...]:
    return (e.at, e.actor, e.action, e.target, _dumps(e.before), _dumps(e.after), e.request_id, e.client)
