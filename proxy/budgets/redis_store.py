"""Budget figures in Redis (`state: {backend: redis}`), shared by every host.

Owns the Lua scripts that do inside Redis, atomically across hosts, what proxy/budgets/store.py
does in SQLite: replace the holds of requests that ended with their real cost, then check every
line of a request against spent + reserved and hold them all, or none (`admit`; `settle` is its
first half alone); renew holds. Per subject
(a key, a group) three keys: `<prefix>budget:<subject>` (a hash: `spent:<window>:<period>` and
`held:<window>:<period>`, the sum of the live holds, in micro-dollars), `…:holds` (a hash: lease →
its lines, `window|period|amount,…`) and `…:expiry` (a sorted set: lease → when it expires, on
Redis's clock, so hosts whose clocks differ agree). An expired hold is charged as spent at its
full amount by the next script that touches its subject, and a late `settle` of it charges only
the difference, as in SQLite. The figures never expire (`usd_total` is for ever). One round trip
per call, so one per request: its charge rides in a later request's `admit`. A failing Redis
raises redis' own errors: refusing is the caller's decision.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proxy.budgets.store import LEASE_TTL, Admitted, Figures, Spent
from proxy.budgets.windows import Charge, Line, Refusal, line_id
from proxy.config.state import StateConfig
from proxy.state.redis_connection import connect, key

if TYPE_CHECKING:
    import redis

# KEYS: three per subject (figures, holds, expiry). Sweeps the subjects' expired holds into spent.
_SWEEP = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
for s = 1, #KEYS / 3 do
  local figures, holds, expiry = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
  for _, dead in ipairs(redis.call('ZRANGEBYSCORE', expiry, '-inf', now)) do
    local held = redis.call('HGET', holds, dead)
    if held then
      for w, p, a in string.gmatch(held, '([^|,]+)|([^|,]+)|([^|,]+)') do
        redis.call('HINCRBY', figures, 'held:' .. w .. ':' .. p, -tonumber(a))
        redis.call('HINCRBY', figures, 'spent:' .. w .. ':' .. p, tonumber(a))
      end
      redis.call('HDEL', holds, dead)
    end
    redis.call('ZREM', expiry, dead)
  end
end
"""

# Charges, then a reservation. ARGV: lease, ttl, n, then n lines to hold (subject index (1-based),
# window, period, limit, amount), then the charges of requests that ended, each: its lease, its
# cost, k, then its k lines (subject index, window, period, amount). Reply: per charged line, in
# order, the spend after it and what it added; then, when n > 0, {0, line index, spent, held} refused or {1} held.
_ADMIT = _SWEEP + """
local reply = {}
local n = tonumber(ARGV[3])
local c = 4 + 5 * n
while c <= #ARGV do
  local lease, cost, k = ARGV[c], tonumber(ARGV[c + 1]), tonumber(ARGV[c + 2])
  local live = {}
  for i = 1, k do
    local b = c + 3 + (i - 1) * 4
    local s, w, p, amount = tonumber(ARGV[b]), ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3])
    if live[s] == nil then
      live[s] = redis.call('HDEL', KEYS[3 * s - 1], lease) == 1
      redis.call('ZREM', KEYS[3 * s], lease)
    end
    local figures = KEYS[3 * s - 2]
    local charge = cost - amount
    if live[s] then
      redis.call('HINCRBY', figures, 'held:' .. w .. ':' .. p, -amount)
      charge = cost
    end
    table.insert(reply, redis.call('HINCRBY', figures, 'spent:' .. w .. ':' .. p, charge))
    table.insert(reply, charge)
  end
  c = c + 3 + 4 * k
end
if n == 0 then return reply end
local lease, ttl = ARGV[1], tonumber(ARGV[2])
for i = 1, n do
  local b = 4 + (i - 1) * 5
  local s, w, p = tonumber(ARGV[b]), ARGV[b + 1], ARGV[b + 2]
  local limit, amount = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local figures = KEYS[3 * s - 2]
  local spent = tonumber(redis.call('HGET', figures, 'spent:' .. w .. ':' .. p) or '0')
  local held = tonumber(redis.call('HGET', figures, 'held:' .. w .. ':' .. p) or '0')
  if spent + held + amount > limit then
    for _, x in ipairs({0, i, tostring(spent), tostring(held)}) do table.insert(reply, x) end
    return reply
  end
end
local mine = {}
for i = 1, n do
  local b = 4 + (i - 1) * 5
  local s, w, p, amount = tonumber(ARGV[b]), ARGV[b + 1], ARGV[b + 2], ARGV[b + 4]
  redis.call('HINCRBY', KEYS[3 * s - 2], 'held:' .. w .. ':' .. p, amount)
  local entry = w .. '|' .. p .. '|' .. amount
  if mine[s] then mine[s] = mine[s] .. ',' .. entry else mine[s] = entry end
end
for s, held in pairs(mine) do
  redis.call('HSET', KEYS[3 * s - 1], lease, held)
  redis.call('ZADD', KEYS[3 * s], now + ttl, lease)
end
table.insert(reply, 1)
return reply
"""

# KEYS: expiry sets; ARGV: ttl, then per key: the lease.
_RENEW = """
local t = redis.call('TIME')
local expires = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
for i = 1, #KEYS do redis.call('ZADD', KEYS[i], 'XX', expires, ARGV[i + 1]) end
return 1
"""

# KEYS: three per subject; ARGV: per wanted figure: subject index, window, period. Reply: spent, held, …
_FIGURES = _SWEEP + """
local reply = {}
for i = 1, #ARGV / 3 do
  local figures = KEYS[3 * tonumber(ARGV[3 * i - 2]) - 2]
  local suffix = ARGV[3 * i - 1] .. ':' .. ARGV[3 * i]
  table.insert(reply, redis.call('HGET', figures, 'spent:' .. suffix) or '0')
  table.insert(reply, redis.call('HGET', figures, 'held:' .. suffix) or '0')
end
return reply
"""


class RedisBudgetStore:
    blocking = False  # redis-py's sockets are cooperative under gevent

    def __init__(self, state: StateConfig, client: redis.Redis | None = None) -> None:
        self.state = state
        self.client = client if client is not None else connect(state)
        self._admit = self.client.register_script(_ADMIT)
        self._renew = self.client.register_script(_RENEW)
        self._figures = self.client.register_script(_FIGURES)
        self._worker = uuid.uuid4().hex[:16]  # leases: this process's id and a counter
        self._leases = itertools.count()

    def _subjects(self, subjects: Sequence[str]) -> tuple[list[str], dict[str, int]]:
        """The three keys of each subject, and each subject's 1-based index among them."""
        index: dict[str, int] = {}
        keys: list[str] = []
        for subject in subjects:
            if subject not in index:
                index[subject] = len(index) + 1
                base = key(self.state, "budget", subject)
                keys += [base, base + ":holds", base + ":expiry"]
        return keys, index

    def admit(self, lines: Sequence[Line], charges: Sequence[Charge] = ()) -> Admitted:
        lease = f"{self._worker}{next(self._leases):x}"
        keys, index = self._subjects([line.subject for line in lines]
                                     + [line.subject for charge in charges for line in charge.lines])
        args: list[Any] = [lease, LEASE_TTL, len(lines)]
        for line in lines:
            args += [index[line.subject], line.window, line.period, line.limit, line.amount]
        reply = self._admit(keys=keys, args=args + _charge_args(charges, index))
        spent, reply = _spent(charges, reply)
        if int(reply[0]) == 1:
            return Admitted(None, spent, lease)
        return Admitted(Refusal(lines[int(reply[1]) - 1], int(reply[2]), int(reply[3])), spent)

    def settle(self, charges: Sequence[Charge]) -> Spent:
        keys, index = self._subjects([line.subject for charge in charges for line in charge.lines])
        reply = self._admit(keys=keys, args=["", LEASE_TTL, 0, *_charge_args(charges, index)])
        return _spent(charges, reply)[0]

    def renew(self, leases: Sequence[tuple[str, Sequence[str]]]) -> None:
        keys, ids = [], []
        for lease, subjects in leases:
            for subject in subjects:
                keys.append(key(self.state, "budget", subject) + ":expiry")
                ids.append(lease)
        if keys:
            self._renew(keys=keys, args=[LEASE_TTL, *ids])

    def figures(self, wanted: Sequence[tuple[str, str, str]]) -> Figures:
        if not wanted:
            return {}
        keys, index = self._subjects([subject for subject, _, _ in wanted])
        args: list[Any] = []
        for subject, window, period in wanted:
            args += [index[subject], window, period]
        reply = self._figures(keys=keys, args=args)
        return {(subject, window): (int(reply[2 * i]), int(reply[2 * i + 1]))
                for i, (subject, window, _) in enumerate(wanted)}


def _charge_args(charges: Sequence[Charge], index: dict[str, int]) -> list[Any]:
    args: list[Any] = []
    for charge in charges:
        args += [charge.lease, charge.cost, len(charge.lines)]
        for line in charge.lines:
            args += [index[line.subject], line.window, line.period, line.amount]
    return args


def _spent(charges: Sequence[Charge], reply: list[Any]) -> tuple[Spent, list[Any]]:
    """Per figure charged, its spend after the charges (the last a line got) and what they added;
    and the rest of the reply."""
    spent: Spent = {}
    at = 0
    for charge in charges:
        for line in charge.lines:
            _, added = spent.get(line_id(line), (0, 0))
            spent[line_id(line)] = (int(reply[at]), added + int(reply[at + 1]))
            at += 2
    return spent, reply[at:]
