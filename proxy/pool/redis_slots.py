"""`max_concurrency` counted across hosts (`state: {backend: redis}`): a slot per attempt in flight,
held in Redis so that two hosts never hold more than an account's limit between them.

Owns the slot ledger. An account's slots are a sorted set `slots:<member>` of tokens scored by when
they expire (Redis's own clock, so hosts' clocks need not agree). Taking a slot is one Lua script:
drop expired tokens, count, add ours if below the limit — no read-modify-write race. A slot lives
`SLOT_TTL` seconds unless renewed; the keeper renews the slots its worker holds every second, so a
host that dies (or is cut off) frees its slots within `SLOT_TTL`, and a live one keeps them for as
long as a stream lasts. Redis unreachable: a slot is granted locally (each worker's own
`max_concurrency` check still holds), so routing fails open rather than refusing every request.
Imports neither Flask nor gevent.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from proxy.config.state import StateConfig
from proxy.state.health import StoreHealth
from proxy.state.redis_connection import key, unreachable_errors

SLOT_TTL = 10.0  # seconds a slot outlives its last renewal

_ACQUIRE = """
local now = redis.call('TIME')
local ms = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[2]))
return 1
"""
_RENEW = """
local now = redis.call('TIME')
local ms = now[1] * 1000 + math.floor(now[2] / 1000)
for i, k in ipairs(KEYS) do
  redis.call('ZADD', k, 'XX', ms + tonumber(ARGV[1]), ARGV[i + 1])
  redis.call('PEXPIRE', k, 2 * tonumber(ARGV[1]))
end
return #KEYS
"""
LOCAL = "local:"  # a slot granted while Redis was away: nothing to release there


class RedisSlots:
    def __init__(self, state: StateConfig, client: Any, health: StoreHealth, holder: str) -> None:
        self.state = state
        self.client = client
        self.health = health
        self.holder = holder
        self._errors = unreachable_errors()
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._lock = threading.Lock()
        self._held: dict[str, str] = {}  # token → its sorted set

    def acquire(self, upstream: str, account_id: str, limit: int) -> str | None:
        """A slot on the account if fewer than `limit` are held across hosts: its token, else None."""
        token = f"{self.holder}:{uuid.uuid4().hex}"
        if not self.health.may_try():
            return LOCAL + token
        slots = key(self.state, "slots:" + json.dumps([upstream, account_id], separators=(",", ":")))
        try:
            granted = self._acquire(keys=[slots], args=[limit, int(SLOT_TTL * 1000), token])
        except self._errors as exc:
            self.health.failed(exc)
            return LOCAL + token
        self.health.ok()
        if not granted:
            return None
        with self._lock:
            self._held[token] = slots
        return token

    def release(self, token: str) -> None:
        with self._lock:
            slots = self._held.pop(token, None)
        if slots is None or not self.health.may_try():
            return  # a local slot, or Redis away: it expires there by itself
        try:
            self.client.zrem(slots, token)
        except self._errors as exc:
            self.health.failed(exc)

    def renew(self) -> None:
        """Push back the expiry of every slot this worker holds (the keeper calls this each tick)."""
        with self._lock:
            held = list(self._held.items())
        if not held or not self.health.may_try():
            return
        try:
            self._renew(keys=[slots for _, slots in held], args=[int(SLOT_TTL * 1000), *(t for t, _ in held)])
        except self._errors as exc:
            self.health.failed(exc)
