"""The pool's state store in Redis (`state: {backend: redis}`): the same methods as the SQLite store
(proxy/pool/store.py), shared by every worker of every host that points at the same Redis.

Owns the Redis layout of account states, counters and the runtime overlay, outbound proxies' states
and the leader lease, and what happens while Redis is away. Layout, under the configured prefix:
`acct:<member>` a hash (`state`: the state and overlay as one JSON document, `version`, the counters
`requests`, `tokens_in`, `tokens_out`, `last_used`, `f:<class>` per failure class), `acct-versions`
a sorted set member → version, `proxy:<member>` / `proxy-versions` the same for proxies, `version`
the one sequence, `leader` the lease (SET NX PX, renewed by its holder), `epoch` a token set once
(a different one at a full resync means Redis lost its data: `take_reseed`), and the channel `changes`,
published to on every state change so the other workers sync at once (the keeper also syncs every
second and asks for everything every `RESYNC_EVERY` seconds — the safety net for a lost message or
a Redis that restarted empty). A member is the JSON array [upstream, id], unambiguous whatever the
names hold. Every write is one Lua script, so states, versions and counter increments land together
and no read-modify-write can interleave.

Redis unreachable: writes are kept here — the newest state per account or proxy, counter deltas
summed — and written when it answers again (`StoreHealth` says when to retry); reads answer
nothing new, so each worker routes on its last known state (fail-open); nobody leads, so probes
wait. Calls are cooperative under gevent (redis-py over patched sockets): `cooperative` tells the
keeper to call them on its greenlet, not on a thread. Imports neither Flask nor gevent.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from proxy.config.state import StateConfig
from proxy.pool.store import STATE_FIELDS, AccountRecord, CounterDelta, PendingWrites, ProxyRecord
from proxy.state.health import StoreHealth
from proxy.state.redis_connection import connect, key, unreachable_errors

log = logging.getLogger("proxy.pool")

RESYNC_EVERY = 30.0  # seconds between two full reads of every state (the safety net under pub/sub)
_PROXY_FIELDS = ("status", "until", "reason", "since", "failures")

_WRITE = """
local p = ARGV[1]
local data = cjson.decode(ARGV[2])
local changed = 0
for _, kind in ipairs({'acct', 'proxy'}) do
  for _, s in ipairs(data[kind]) do
    local v = redis.call('INCR', p .. 'version')
    redis.call('HSET', p .. kind .. ':' .. s[1], 'state', s[2], 'version', v)
    redis.call('ZADD', p .. kind .. '-versions', v, s[1])
    changed = v
  end
end
for _, d in ipairs(data.deltas) do
  local k = p .. 'acct:' .. d[1]
  redis.call('ZADD', p .. 'acct-versions', 'NX', 0, d[1])
  redis.call('HINCRBY', k, 'requests', d[2])
  redis.call('HINCRBY', k, 'tokens_in', d[3])
  redis.call('HINCRBY', k, 'tokens_out', d[4])
  local last = redis.call('HGET', k, 'last_used')
  if not last or tonumber(last) < tonumber(d[5]) then redis.call('HSET', k, 'last_used', d[5]) end
  for klass, count in pairs(d[6]) do redis.call('HINCRBY', k, 'f:' .. klass, count) end
end
if changed > 0 then redis.call('PUBLISH', p .. 'changes', changed) end
return changed
"""
_READ = """
local out = {}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[2], '+inf')) do
  table.insert(out, m)
  table.insert(out, redis.call('HGETALL', ARGV[1] .. m))
end
return out
"""
_LEAD = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if not holder then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0
"""


class RedisStore:
    cooperative = True  # network IO that yields under gevent: call on the greenlet, not a thread

    def __init__(self, state: StateConfig, health: StoreHealth | None = None, client: Any = None) -> None:
        self.state = state
        self.health = health or StoreHealth("redis")
        self.client = client if client is not None else connect(state)
        self._errors = unreachable_errors()
        self._write = self.client.register_script(_WRITE)
        self._read = self.client.register_script(_READ)
        self._lead = self.client.register_script(_LEAD)
        self._lock = threading.Lock()
        self._pending = PendingWrites()  # buffered while Redis is away
        self._next_resync = 0.0
        self._epoch: Any = None  # the token the Redis we write to was seeded with
        self._reseed = False
        self.health.on_recovery(self.resync_soon)

    def resync_soon(self) -> None:
        self._next_resync = 0.0

    # ------------------------------------------------------------ the StateStore methods

    def load(self) -> list[AccountRecord]:
        return self._records("acct", -1) or []

    def counters(self) -> list[AccountRecord]:
        return self.load()

    def write(self, states: list[AccountRecord], deltas: list[CounterDelta],
              proxies: Sequence[ProxyRecord] = ()) -> None:
        with self._lock:
            self._pending.add(states, deltas, proxies)
            if not self._pending or not self.health.may_try():
                return
            batch = self._pending.take()
        payload = {
            "acct": [[_member(r.upstream, r.id), _state_json(r)] for r in batch.states.values()],
            "proxy": [[_member(r.upstream, r.id), json.dumps({f: getattr(r, f) for f in _PROXY_FIELDS})]
                      for r in batch.proxies.values()],
            "deltas": [[_member(d.upstream, d.id), d.requests, d.tokens_in, d.tokens_out, repr(d.last_used),
                        d.failures or {}] for d in batch.deltas.values()],
        }
        try:
            self._write(args=[self.state.prefix, json.dumps(payload)])
        except self._errors as exc:
            self.health.failed(exc)
            with self._lock:  # back in the buffer, under anything newer that came meanwhile
                self._pending.put_back(batch)
            return
        self.health.ok()

    def take_reseed(self) -> bool:
        """True once after Redis was found emptied (restarted without persistence, flushed): the
        keeper then writes every state this worker knows again, so the shared view — disabled
        accounts, the runtime overlay — is rebuilt from the workers' memory (counters are lost)."""
        reseed, self._reseed = self._reseed, False
        return reseed

    def _check_epoch(self) -> None:
        epoch = key(self.state, "epoch")
        try:
            self.client.set(epoch, uuid.uuid4().hex, nx=True)
            current = self.client.get(epoch)
        except self._errors as exc:
            self.health.failed(exc)
            return
        if self._epoch is not None and current != self._epoch:
            log.warning("state store: Redis lost its data (restarted empty or flushed); writing this worker's "
                        "account states and runtime accounts to it again")
            self._reseed = True
        self._epoch = current

    def changes_since(self, version: int) -> tuple[list[AccountRecord], int]:
        everything = time.monotonic() >= self._next_resync
        if everything:
            self._check_epoch()
        records = self._records("acct", -1 if everything else version)
        if records is None:
            return [], version  # Redis away: nothing new; this worker goes on with what it knows
        if everything:
            self._next_resync = time.monotonic() + RESYNC_EVERY
            # From the newest version stored — lower than ours if Redis restarted empty.
            return records, max((r.version for r in records), default=0)
        return records, max((r.version for r in records), default=version)

    def proxy_changes_since(self, version: int) -> tuple[list[ProxyRecord], int]:
        found = self._read_raw("proxy", version)
        if found is None:
            return [], version
        rows = []
        for member, fields in found:
            upstream, ident = json.loads(member)
            values = json.loads(fields.get("state", "{}"))
            rows.append(ProxyRecord(upstream=upstream, id=ident, version=int(fields.get("version", 0)),
                                    **{f: values[f] for f in _PROXY_FIELDS if f in values}))
        return rows, max((r.version for r in rows), default=version)

    def lead(self, holder: str, ttl: float) -> bool:
        """Take or renew the leader lease, one holder across every host; False while Redis is away."""
        if not self.health.may_try():
            return False
        try:
            won = self._lead(keys=[key(self.state, "leader")], args=[holder, int(ttl * 1000)])
        except self._errors as exc:
            self.health.failed(exc)
            return False
        self.health.ok()
        return bool(won)

    # ------------------------------------------------------------ change notices

    def watch(self, wake: Callable[[], None], sleep: Callable[[float], None] = time.sleep) -> None:
        """Call `wake` whenever another worker or host stored a state change (and after a
        reconnect). Runs until killed; the keeper runs it in a greenlet of its own."""
        while True:
            if not self.health.may_try():
                sleep(0.5)
                continue
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(key(self.state, "changes"))
                wake()  # anything missed while not subscribed
                while True:
                    if pubsub.get_message(timeout=1.0) is not None:
                        wake()
            except self._errors as exc:
                self.health.failed(exc)
            finally:
                with contextlib.suppress(Exception):  # closing a broken connection may fail too
                    pubsub.close()

    # ------------------------------------------------------------ reading

    def _read_raw(self, kind: str, version: int) -> list[tuple[str, dict[str, str]]] | None:
        if not self.health.may_try():
            return None
        try:
            flat = self._read(keys=[key(self.state, f"{kind}-versions")],
                              args=[key(self.state, f"{kind}:"), version])
        except self._errors as exc:
            self.health.failed(exc)
            return None
        self.health.ok()
        out = []
        for member, pairs in zip(flat[::2], flat[1::2], strict=True):
            fields = {pairs[i].decode(): pairs[i + 1].decode() for i in range(0, len(pairs), 2)}
            out.append((member.decode(), fields))
        return out

    def _records(self, kind: str, version: int) -> list[AccountRecord] | None:
        found = self._read_raw(kind, version)
        if found is None:
            return None
        return [_record(member, fields) for member, fields in found]


def _member(upstream: str, ident: str) -> str:
    return json.dumps([upstream, ident], separators=(",", ":"))


def _state_json(record: AccountRecord) -> str:
    return json.dumps({name: getattr(record, name) for name in STATE_FIELDS})


def _record(member: str, fields: dict[str, str]) -> AccountRecord:
    upstream, ident = json.loads(member)
    record = AccountRecord(upstream=upstream, id=ident, version=int(fields.get("version", 0)))
    for name, value in json.loads(fields.get("state", "{}")).items():
        if name in STATE_FIELDS:
            setattr(record, name, value)
    record.requests = int(fields.get("requests", 0))
    record.tokens_in = int(fields.get("tokens_in", 0))
    record.tokens_out = int(fields.get("tokens_out", 0))
    record.last_used = float(fields.get("last_used", 0.0))
    record.failures = {name[2:]: int(value) for name, value in fields.items() if name.startswith("f:")}
    return record
