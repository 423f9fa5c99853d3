"""The request log in Redis (`state: {backend: redis}`): one log every host writes and reads.

Owns the Redis layout of the log, under the configured prefix: `reqlog:e:<id>` a hash per request
(`meta`, and one field per body part), expiring after `retention_hours`; `reqlog:time` a sorted set
of the ids by arrival; `reqlog:size` a hash of each id's size; `reqlog:total` the bytes kept and
`reqlog:dropped` how many requests the size bound dropped. One Lua script adds a batch and enforces
both bounds — the ids past retention leave the set (their hashes have expired on their own), then
the oldest go while the total is over `max_total_mb` — so hosts adding at once never overshoot it
together. Reads are plain commands. While Redis is away the writer's batch is dropped and counted
(proxy/ops/request_log.py): the log is for looking, never for holding requests up.
Calls are cooperative under gevent (the standard library is patched); imports neither Flask nor gevent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from proxy.config.state import StateConfig
from proxy.ops.request_entry import LoggedRequest
from proxy.state.redis_connection import connect, key

_ADD = """
local p, ttl, cutoff, max = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local times, sizes, total = p .. 'reqlog:time', p .. 'reqlog:size', p .. 'reqlog:total'
local i = 5
while i <= #ARGV do
  local id, time, size, nparts = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local k = p .. 'reqlog:e:' .. id
  redis.call('DEL', k)
  redis.call('HSET', k, 'meta', ARGV[i + 4])
  for j = 1, nparts do redis.call('HSET', k, ARGV[i + 3 + 2 * j], ARGV[i + 4 + 2 * j]) end
  redis.call('EXPIRE', k, ttl)
  local old = redis.call('HGET', sizes, id)
  if old then redis.call('DECRBY', total, old) end
  redis.call('ZADD', times, time, id)
  redis.call('HSET', sizes, id, size)
  redis.call('INCRBY', total, size)
  i = i + 5 + 2 * nparts
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', times, '-inf', '(' .. cutoff)) do
  redis.call('DECRBY', total, redis.call('HGET', sizes, id) or 0)
  redis.call('HDEL', sizes, id)
  redis.call('DEL', p .. 'reqlog:e:' .. id)
end
redis.call('ZREMRANGEBYSCORE', times, '-inf', '(' .. cutoff)
local dropped = 0
while tonumber(redis.call('GET', total) or '0') > max do
  local oldest = redis.call('ZPOPMIN', times)
  if #oldest == 0 then break end
  redis.call('DECRBY', total, redis.call('HGET', sizes, oldest[1]) or 0)
  redis.call('HDEL', sizes, oldest[1])
  redis.call('DEL', p .. 'reqlog:e:' .. oldest[1])
  dropped = dropped + 1
end
if dropped > 0 then redis.call('INCRBY', p .. 'reqlog:dropped', dropped) end
return dropped
"""


class RedisRequestLog:
    blocking = True
    cooperative = True  # a round trip yields to other greenlets: called on the writer's greenlet

    def __init__(self, state: StateConfig, retention_s: float, max_bytes: int, client: Any = None) -> None:
        self.state, self.retention_s, self.max_bytes = state, retention_s, max_bytes
        self.client = client if client is not None else connect(state)
        self._add = self.client.register_script(_ADD)

    def add(self, entries: Sequence[LoggedRequest], now: float) -> int:
        args: list[Any] = [self.state.prefix, max(1, int(self.retention_s)), repr(now - self.retention_s),
                           self.max_bytes]
        for entry in entries:
            args += [entry.request_id, repr(entry.time), entry.size, len(entry.parts), entry.meta_json()]
            for name, data in entry.parts.items():
                args += [name, data]
        return int(self._add(args=args))

    def get(self, request_id: str) -> LoggedRequest | None:
        fields: Any = self.client.hgetall(key(self.state, "reqlog:e", request_id))
        return _entry(fields) if fields else None

    def having(self, request_ids: Sequence[str]) -> set[str]:
        if not request_ids:
            return set()
        with self.client.pipeline(transaction=False) as pipe:
            for rid in request_ids:
                pipe.exists(key(self.state, "reqlog:e", rid))
            found = pipe.execute()
        return {rid for rid, there in zip(request_ids, found, strict=True) if there}

    def between(self, since: float, until: float) -> Iterator[LoggedRequest]:
        ids: list[Any] = self.client.zrangebyscore(key(self.state, "reqlog:time"), since, f"({until}")
        for rid in ids:
            fields: Any = self.client.hgetall(key(self.state, "reqlog:e", rid.decode()))
            if fields:
                yield _entry(fields)

    def totals(self) -> dict[str, int]:
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zcard(key(self.state, "reqlog:time"))
            pipe.get(key(self.state, "reqlog:total"))
            pipe.get(key(self.state, "reqlog:dropped"))
            count, total, dropped = pipe.execute()
        return {"entries": int(count), "bytes": int(total or 0), "dropped": int(dropped or 0)}


def _entry(fields: dict[bytes, bytes]) -> LoggedRequest:
    meta = json.loads(fields[b"meta"])
    parts = {name.decode(): data for name, data in fields.items() if name != b"meta"}
    return LoggedRequest(meta["request_id"], _epoch(meta), meta.get("client_key") or "", meta.get("model") or "",
                         meta.get("status") or 0, meta, parts)


def _epoch(meta: dict[str, Any]) -> float:
    return datetime.fromisoformat(meta["time"].replace("Z", "+00:00")).timestamp()
