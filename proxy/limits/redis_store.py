"""Per-key limit figures in Redis (`state: {backend: redis}`), shared by every host.

Owns the Lua scripts that do, inside Redis and so atomically across hosts, what
proxy/limits/rules.py does for the other stores: check every limit and reserve the request in one
step, settle its reservation with the tokens it used, renew leases. Buckets and leases run on
Redis's clock (`TIME`), so hosts whose clocks differ still agree; the UTC day and month a request
falls in are the host's to say (a few seconds' skew only moves which window a midnight request
counts in). Keys: `<prefix>limits:<key name>` (a hash: `<limit>:used`, `<limit>:stamp`) and
`<prefix>limits:<key name>:leases` (a sorted set: lease id → expiry), expiring on their own when
unused. A failing Redis raises redis' own errors: falling back is the limiter's decision.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from proxy.config.limits import KeyLimits
from proxy.config.state import StateConfig
from proxy.limits import rules
from proxy.limits.rules import Refusal
from proxy.limits.store import LEASE_TTL, Decision
from proxy.state.redis_connection import connect, key

if TYPE_CHECKING:
    import redis

IDLE_EXPIRY = 40 * 86400  # seconds a key's figures stay after its last request (longer than a month)

# Shared by both scripts: the time, the windows, the limits from ARGV, and `used_now` (rules.used_now).
_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local win = {tokens_per_day = tonumber(ARGV[1]), tokens_per_month = tonumber(ARGV[2])}
local win_end = {tokens_per_day = tonumber(ARGV[3]), tokens_per_month = tonumber(ARGV[4])}
local tokens, lease, ttl = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local names, limits, extra = {}, {}, {}
for i = 1, tonumber(ARGV[8]) do
  names[i], limits[i], extra[i] = ARGV[6 + 3 * i], tonumber(ARGV[7 + 3 * i]), tonumber(ARGV[8 + 3 * i])
end
local function used_now(name, limit)
  local used = tonumber(redis.call('HGET', KEYS[1], name .. ':used') or '0')
  local stamp = tonumber(redis.call('HGET', KEYS[1], name .. ':stamp') or '0')
  if win[name] then
    if stamp == win[name] then return used end
    return 0
  end
  return math.max(0, used - math.max(0, now - stamp) * limit / 60)
end
local function put(name, used)
  local stamp = now
  if win[name] then stamp = win[name] end
  redis.call('HSET', KEYS[1], name .. ':used', tostring(used), name .. ':stamp', tostring(stamp))
end
"""

# rules.check, then rules.reserve. Reply: {0, limit, value, wait} refused; {1, now, name, reserved, …} let in.
_ADMIT = _PRELUDE + """
local worst, worst_value, worst_wait = nil, 0, -1
local in_flight = 0
for i, name in ipairs(names) do
  local limit, wait = limits[i], nil
  if name == 'max_concurrent' then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
    in_flight = redis.call('ZCARD', KEYS[2])
    if in_flight >= limit then wait = 1 end
  else
    local cost = math.min(tokens, limit)
    if name == 'requests_per_minute' then cost = 1 end
    local used = used_now(name, limit)
    if used + cost > limit then
      if win[name] then wait = win_end[name] else wait = (used + cost - limit) * 60 / limit end
    end
  end
  if wait and wait > worst_wait then worst, worst_value, worst_wait = name, limit, wait end
end
if worst then return {0, worst, worst_value, tostring(worst_wait)} end
local reply = {1, tostring(now)}
for i, name in ipairs(names) do
  local limit = limits[i]
  if name == 'max_concurrent' then
    redis.call('ZADD', KEYS[2], now + ttl, lease)
    redis.call('EXPIRE', KEYS[2], math.ceil(ttl) + 60)
  else
    local cost = math.min(tokens, limit)
    if name == 'requests_per_minute' then cost = 1 end
    put(name, used_now(name, limit) + cost)
    if name ~= 'requests_per_minute' then
      table.insert(reply, name)
      table.insert(reply, tostring(cost))
    end
  end
end
redis.call('EXPIRE', KEYS[1], IDLE_EXPIRY)
return reply
""".replace("IDLE_EXPIRY", str(IDLE_EXPIRY))

# rules.settle: `extra` is what the request reserved against each limit (0 for a window it left).
_SETTLE = _PRELUDE + """
redis.call('ZREM', KEYS[2], lease)
for i, name in ipairs(names) do
  if name ~= 'max_concurrent' and name ~= 'requests_per_minute' then
    put(name, math.max(0, used_now(name, limits[i]) + tokens - extra[i]))
  end
end
redis.call('EXPIRE', KEYS[1], IDLE_EXPIRY)
return 1
""".replace("IDLE_EXPIRY", str(IDLE_EXPIRY))

# What another store took while Redis was away (rules.charge): `extra` is the amount for each limit,
# already drained to now by the caller (rules.still_owed); KEYS[3] marks the charge applied, so one
# sent again after a lost answer is applied once.
_CHARGE = _PRELUDE + """
if redis.call('SET', KEYS[3], 1, 'NX', 'EX', 86400) == false then return 0 end
for i, name in ipairs(names) do
  if name ~= 'max_concurrent' and extra[i] ~= 0 then put(name, math.max(0, used_now(name, limits[i]) + extra[i])) end
end
redis.call('EXPIRE', KEYS[1], IDLE_EXPIRY)
return 1
""".replace("IDLE_EXPIRY", str(IDLE_EXPIRY))

_RENEW = """
local t = redis.call('TIME')
local expires = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', expires, ARGV[i]) end
return 1
"""


class RedisLimitStore:
    blocking = False  # redis-py's sockets are cooperative under gevent

    def __init__(self, state: StateConfig, client: redis.Redis | None = None) -> None:
        self.state = state
        self.client = client if client is not None else connect(state)
        self._admit = self.client.register_script(_ADMIT)
        self._settle = self.client.register_script(_SETTLE)
        self._renew = self.client.register_script(_RENEW)
        self._charge = self.client.register_script(_CHARGE)

    def _keys(self, name: str) -> list[str]:
        base = key(self.state, "limits", name)
        return [base, base + ":leases"]

    @staticmethod
    def _args(limits: KeyLimits, tokens: int, lease: str, extra: Mapping[str, float], at: float) -> list[Any]:
        now = time.time()
        args: list[Any] = [rules.window_id("tokens_per_day", at), rules.window_id("tokens_per_month", at),
                           rules.window_end("tokens_per_day", now) - now,
                           rules.window_end("tokens_per_month", now) - now,
                           tokens, lease, LEASE_TTL, len(limits.items())]
        for name, value in limits.items():
            args += [name, value, extra.get(name, 0)]
        return args

    def admit(self, key: str, limits: KeyLimits, tokens: int, lease: str) -> Decision:
        reply = self._admit(keys=self._keys(key), args=self._args(limits, tokens, lease, {}, time.time()))
        if int(reply[0]) == 0:
            return Decision(Refusal(_text(reply[1]), int(reply[2]), float(reply[3])))
        pairs = reply[2:]
        return Decision(None, {_text(pairs[i]): float(pairs[i + 1]) for i in range(0, len(pairs), 2)}, float(reply[1]))

    def settle(self, key: str, limits: KeyLimits, reserved: Mapping[str, float], tokens: int, lease: str,
               reserved_at: float) -> None:
        now = time.time()
        held = {name: amount for name, amount in reserved.items()
                if name in rules.BUCKETS or rules.window_id(name, reserved_at) == rules.window_id(name, now)}
        self._settle(keys=self._keys(key), args=self._args(limits, tokens, lease, held, now))

    def charge(self, key: str, limits: KeyLimits, amounts: Mapping[str, float], token: str) -> None:
        base, leases = self._keys(key)
        args = self._args(limits, 0, "", amounts, time.time())
        self._charge(keys=[base, leases, f"{base}:charge:{token}"], args=args)

    def renew(self, leases: Mapping[str, Sequence[str]]) -> None:
        for name, ids in leases.items():
            if ids:
                self._renew(keys=self._keys(name)[1:], args=[LEASE_TTL, *ids])

    def status(self, key: str, limits: KeyLimits) -> dict[str, dict[str, float]]:
        base, leases = self._keys(key)
        pipe = self.client.pipeline(transaction=True)
        pipe.time()
        pipe.hgetall(base)
        pipe.zrange(leases, 0, -1, withscores=True)
        (seconds, micros), fields, held = pipe.execute()
        now = seconds + micros / 1e6
        values = {_text(k): float(v) for k, v in fields.items()}
        state = {name: [values.get(f"{name}:used", 0.0), values.get(f"{name}:stamp", 0.0)]
                 for name, _ in limits.items() if f"{name}:used" in values}
        return rules.status(limits, state, sum(1 for _, expires in held if expires > now), now)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
