"""The worker's view of the keys made at runtime: which key a presented secret is, kept current.

Owns matching a secret against runtime client and admin keys — one HMAC under the pepper
(proxy/keys/secrets.py) and one dict lookup, so checking a runtime key costs next to nothing beside
the config's own check (bench/key_check.py) — with expiry and a rotation's grace decided at match
time against the clock, and, on a miss, one look at the store's version (at most every ASK_EVERY),
so a key made a moment ago elsewhere works at once; the overlay on the config's keys (disabled at
runtime); and keeping all of it current: `refresh` asks the store for its version and, when it
moved, takes a new snapshot (a greenlet calls it every `POLL` seconds, so a key revoked on any
worker or host stops within a second). When keys were last used is kept in memory and handed to
the store in batches (`flush_used`), never on the request's path. Builds no Flask or requests
object.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from proxy.config.keys import ClientKey
from proxy.config.limits import parse_limits
from proxy.config.model import Config
from proxy.config.money import parse_budget
from proxy.keys.groups import effective
from proxy.keys.model import RuntimeAdmin, RuntimeKey, Snapshot
from proxy.keys.secrets import digest
from proxy.keys.store import KeyStore

log = logging.getLogger("proxy.keys")
POLL = 0.25  # seconds between two looks at the store's version: a revocation is seen within a second
ASK_EVERY = 0.05  # seconds between two looks at the store on a secret no key has
PURGE_EVERY = 3600.0  # seconds between two purges of the audit trail (each worker)
USED_EVERY = 5.0  # seconds between two batches of last-used times handed to the store


@dataclass(frozen=True)
class _Found:
    entry: ClientKey
    until: float | None  # the secret's grace end (an old secret of a rotated key); None: current
    expires_at: float | None


def client_entry(key: RuntimeKey) -> ClientKey:
    """A runtime key as the request path knows keys (its limits and budget parsed as the config's)."""
    return ClientKey(name=key.name, key="", models=key.models, disabled=key.disabled,
                     limits=parse_limits(key.limits, f"keys.{key.name}.limits"),
                     budget=parse_budget(key.budget, f"keys.{key.name}.budget"))


class KeyDirectory:
    def __init__(self, store: KeyStore, pepper: bytes, clock: Callable[[], float] = time.time,
                 call: Callable[[Callable[[], Any]], Any] = lambda fn: fn()) -> None:
        self.store = store
        self.pepper = pepper
        self.clock = clock
        self._call = call  # how a store call runs (on a thread for SQLite, in a worker)
        self.snapshot = Snapshot(version=-1)
        self._clients: dict[str, _Found] = {}
        self._admins: dict[str, RuntimeAdmin] = {}
        self._entries: dict[str, ClientKey] = {}
        self._used: dict[str, float] = {}
        self._asked = 0.0  # when a miss last asked the store
        self._effective: tuple[Config, int, Config] | None = None
        _every.add(self)
        self.audit_retention = 365 * 86400.0  # seconds the audit trail is kept (the config's audit.retention_days)

    # ------------------------------------------------------------ kept current

    def refresh(self) -> bool:
        """Take the store's snapshot if it changed since the last one; whether it did."""
        version = self._call(self.store.version)
        if version == self.snapshot.version:
            return False
        self._take(self._call(self.store.snapshot))
        return True

    def _take(self, snapshot: Snapshot) -> None:
        clients: dict[str, _Found] = {}
        entries: dict[str, ClientKey] = {}
        for key in snapshot.keys.values():
            try:
                entry = client_entry(key)
            except Exception as exc:  # a stored key this version cannot read: refused, said once
                log.warning("runtime key %r cannot be used: %s", key.name, exc)
                continue
            entries[key.name] = entry
            for secret in key.secrets:
                clients[secret.digest] = _Found(entry, secret.until, key.expires_at)
        self._clients = clients
        self._entries = entries
        self._admins = {a.secret.digest: a for a in snapshot.admins.values()}
        self.snapshot = snapshot

    # ------------------------------------------------------------ the request's check

    def match_client(self, secret: str) -> ClientKey | None:
        """The runtime client key `secret` is, while it may be used (not expired, within its grace);
        None otherwise. A disabled key is returned: the edge says it is disabled."""
        hashed = digest(secret, self.pepper)
        found = self._clients.get(hashed)
        now = self.clock()
        if found is None and now - self._asked >= ASK_EVERY:
            # a key made a moment ago on another worker or host works at once: on a miss, ask the
            # store whether it changed (at most every ASK_EVERY, so a flood of bad keys costs little)
            self._asked = now
            try:
                self.refresh()
            except Exception:  # the store is away: the keys known stand
                return None
            found = self._clients.get(hashed)
        if found is None:
            return None
        if (found.until is not None and now >= found.until) or (found.expires_at is not None
                                                                 and now >= found.expires_at):
            return None
        self._used[found.entry.name] = now
        return found.entry

    def match_admin(self, secret: str) -> RuntimeAdmin | None:
        return self._admins.get(digest(secret, self.pepper)) if self._admins else None

    def overlaid(self, entry: ClientKey) -> ClientKey:
        """A config file's key as runtime left it (disabled or not)."""
        overlay = self.snapshot.overlays.get(entry.name)
        if overlay is None or overlay.disabled == entry.disabled:
            return entry
        return replace(entry, disabled=overlay.disabled)

    def effective(self, config: Config) -> Config:
        """`config` with the key groups runtime made or joined (proxy/keys/groups.py), one object per
        config and snapshot: budgets key their per-config caches by it."""
        made = self._effective
        if made is None or made[0] is not config or made[1] != self.snapshot.version:
            groups = effective(config, self.snapshot)
            made = self._effective = (config, self.snapshot.version,
                                      config if groups == config.key_groups else replace(config, key_groups=groups))
        return made[2]

    def entry(self, name: str) -> ClientKey | None:
        """A runtime key's entry by name (for budgets and listings)."""
        return self._entries.get(name)

    def used(self, name: str) -> None:
        self._used[name] = self.clock()

    def flush_used(self) -> None:
        used, self._used = self._used, {}
        if used:
            try:
                self._call(lambda: self.store.touch(used))
            except Exception as exc:  # next time: when a key was last used is not worth a request
                log.warning("runtime keys: could not record when %d keys were last used (%s)", len(used),
                            type(exc).__name__)
                for name, at in used.items():
                    self._used.setdefault(name, at)

    # ------------------------------------------------------------ the worker's greenlet

    def start(self) -> None:
        """Refresh every POLL seconds (and hand over last-used times every USED_EVERY), from a greenlet."""
        import gevent  # deferred: the CLI uses the directory without a hub

        self._greenlet = gevent.spawn(self._run)

    def purge(self) -> None:
        """The audit trail past its retention, and idempotency records past their hour."""
        now = self.clock()
        try:
            self._call(lambda: self.store.purge(now - self.audit_retention, now))
        except Exception as exc:
            log.warning("runtime keys: could not purge the audit trail (%s)", type(exc).__name__)

    def _run(self) -> None:
        import gevent

        next_used = self.clock() + USED_EVERY
        next_purge = self.clock()
        while True:
            gevent.sleep(POLL)
            try:
                self.refresh()
            except Exception as exc:  # the store is away: keep the last snapshot, say so once a while
                log.warning("runtime keys: the key store does not answer (%s); keeping the keys known",
                            type(exc).__name__)
            if self.clock() >= next_used:
                self.flush_used()
                next_used = self.clock() + USED_EVERY
            if self.clock() >= next_purge:
                next_purge = self.clock() + PURGE_EVERY
                self.purge()


_every: weakref.WeakSet[KeyDirectory] = weakref.WeakSet()  # this process's, for flush_all


def flush_all() -> None:
    """Hand the store every last-used time still held (gunicorn's worker_exit hook calls this)."""
    for directory in list(_every):
        directory.flush_used()
