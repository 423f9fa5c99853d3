"""Where runtime keys live: the `KeyStore` interface, and its in-memory store (`state_path: null`:
this worker's alone, lost on restart). The state file's (one host) and Redis's (several hosts) sit
beside it; the same tests hold all three to the same answers.

Owns keeping the snapshot (proxy/keys/model.py) and changing it atomically — a `Change` and its
`AuditEntry` together, or neither — with a version that goes up with every change (workers poll
it to know their copy is stale), idempotency records (an hour, then forgotten), the audit log
(append-only; queried by time, actor and target; purged past its retention) and when keys were
last used (written in batches, never on the request's path). Pure of Flask and gevent.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from proxy.keys.model import AuditEntry, Change, Idempotent, NameTaken, Snapshot


class KeyStore(Protocol):
    blocking: bool  # True when calls block (SQLite: run them on a thread)

    def version(self) -> int:
        """Goes up with every `commit`: cheap, polled by every worker."""

    def snapshot(self) -> Snapshot:
        """Everything but the audit log, at one version."""

    def commit(self, change: Change, audit: AuditEntry, idempotent: Idempotent | None = None) -> int:
        """Apply `change`, append `audit`, keep `idempotent` — atomically; the new version. Raises
        NameTaken (applying nothing) when a name in `change.new_*` exists already."""

    def idempotent(self, actor: str, key: str, now: float) -> Idempotent | None:
        """The record kept for (actor, key), if it has not expired."""

    def touch(self, used: Mapping[str, float]) -> None:
        """Key name → when it was last presented (the later time wins)."""

    def audit(self, since: float | None = None, until: float | None = None, actor: str | None = None,
              target: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        """Entries, newest first."""

    def purge(self, before: float, now: float) -> int:
        """Drop audit entries older than `before`, and idempotency records expired at `now`; how many
        audit entries went."""


class MemoryKeyStore:
    blocking = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot = Snapshot(version=0)
        self._audit: list[AuditEntry] = []
        self._idempotent: dict[tuple[str, str], Idempotent] = {}

    def version(self) -> int:
        return self._snapshot.version

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def commit(self, change: Change, audit: AuditEntry, idempotent: Idempotent | None = None) -> int:
        with self._lock:
            s = self._snapshot
            taken = set(change.taken) | s.keys.keys() | s.groups.keys() | s.admins.keys()
            for name in (*change.new_keys, *change.new_groups, *change.new_admins):
                if name in taken:
                    raise NameTaken(name)
            keys = {n: k for n, k in s.keys.items() if n not in change.delete_keys}
            keys.update({k.name: k for k in change.put_keys})
            groups = {n: g for n, g in s.groups.items() if n not in change.delete_groups}
            groups.update({g.name: g for g in change.put_groups})
            admins = {n: a for n, a in s.admins.items() if n not in change.delete_admins}
            admins.update({a.name: a for a in change.put_admins})
            overlays = {**s.overlays, **{o.name: o for o in change.put_overlays}}
            self._snapshot = replace(s, version=s.version + 1, keys=keys, groups=groups, admins=admins,
                                     overlays=overlays)
            self._audit.append(audit)
            if idempotent is not None:
                self._idempotent[(idempotent.actor, idempotent.key)] = idempotent
            return self._snapshot.version

    def idempotent(self, actor: str, key: str, now: float) -> Idempotent | None:
        found = self._idempotent.get((actor, key))
        return found if found is not None and found.expires > now else None

    def touch(self, used: Mapping[str, float]) -> None:
        with self._lock:
            last = dict(self._snapshot.last_used)
            for name, at in used.items():
                last[name] = max(at, last.get(name, 0.0))
            self._snapshot = replace(self._snapshot, last_used=last)  # not a change: the version stays

    def audit(self, since: float | None = None, until: float | None = None, actor: str | None = None,
              target: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        found = [e for e in reversed(self._audit)
                 if (since is None or e.at >= since) and (until is None or e.at < until)
                 and (actor is None or e.actor == actor) and (target is None or e.target == target)]
        # newest first by time (hosts' clocks may not write in order); a stable sort keeps entries of
        # the same instant later-written first, as the state file and Redis order them
        found.sort(key=lambda e: e.at, reverse=True)
        return found[:limit]

    def purge(self, before: float, now: float) -> int:
        with self._lock:
            kept = [e for e in self._audit if e.at >= before]
            gone = len(self._audit) - len(kept)
            self._audit = kept
            self._idempotent = {k: v for k, v in self._idempotent.items() if v.expires > now}
            return gone
