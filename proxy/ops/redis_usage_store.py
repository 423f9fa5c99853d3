"""The usage store in Redis (`state: {backend: redis}`): the `UsageStore` methods of
proxy/ops/usage_store.py over one Redis shared by every host, so `/admin/usage` on any host counts
every request of all of them.

Owns the Redis layout of usage and what happens while Redis is away. Under the configured prefix:
`usage:<minute>` a hash per minute, one field per (dimensions, counter) — `<JSON array of the
dimensions>|<counter>`, the dimensions in `DIMENSIONS` order — added to with HINCRBY (a field written
before a dimension was added is an array short of it, read back with that dimension's default:
`_row`); `usage-minutes` a sorted set of the minutes that
have figures, so a query reads only those of its window (one HGETALL each, in one pipeline) and a
retention purge finds what to drop; `recent` a list of JSON entries, newest first, trimmed to
`RECENT_CAP`; `usage-applied:<writer>` the sequence number of the last batch this store instance
(a worker) wrote. A batch is one Lua script: all of it or nothing, and no read-modify-write.

Redis unreachable, or failing over to a replica (state.sentinel): the batch goes back to the
worker's `UsageBuffer` (proxy/ops/usage_buffer.py: merged, bounded, overflow counted and logged)
and is written with the next batch, or by the writer's retry on the keeper's tick, once
`StoreHealth` lets a call through again. A batch whose answer was lost may have been applied: it is
sent again with the same sequence number, which the script skips if it has seen it — so a
connection cut mid-write neither loses nor doubles a request's usage. With `state.sentinel` a batch
is kept until a replica acknowledged it (`WAIT`, bounded by `REPLICA_WAIT_MS`, or a later batch's
wait) and sent again after a failover, so a primary killed before replicating does not take counted
figures with it. A query while Redis is away
answers 503 saying so. Imports neither Flask nor gevent: calls are cooperative under gevent
(`cooperative`), run on the caller's greenlet (the usage writer's: one batch at a time).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from proxy.config.state import StateConfig
from proxy.errors import ProxyError
from proxy.ops.usage_buffer import Batch, UsageBuffer
from proxy.ops.usage_store import (
    COUNTERS,
    DIMENSIONS,
    RECENT_CAP,
    TIMINGS,
    MemoryUsageStore,
    RecentEntry,
    UsageAnswer,
    UsageQuery,
    UsageRow,
    merged,
    with_defaults,
)
from proxy.state.health import StoreHealth
from proxy.state.redis_connection import connect, key, unreachable_errors

log = logging.getLogger("proxy.usage")

REPLICA_WAIT_MS = 500  # with state.sentinel: how long a batch waits for a replica to have it
MAX_UNCONFIRMED = 1000  # batches kept for sending again while no replica acknowledges (no replica up)
APPLIED_TTL = 7 * 86400  # seconds a writer's last sequence number is kept after its last batch
# One script per batch: atomic like a transaction, and one command to send and one reply to read
# (a MULTI of a dozen HINCRBYs a row costs the worker several times the CPU).
_ADD = """
local p, minutes = ARGV[1], ARGV[1] .. 'usage-minutes'
local applied = p .. 'usage-applied:' .. ARGV[4]
if tonumber(redis.call('GET', applied) or '0') >= tonumber(ARGV[5]) then return -1 end
redis.call('SET', applied, ARGV[5], 'EX', ARGV[6])
local batch = cjson.decode(ARGV[2])
for _, row in ipairs(batch.rows) do
  local k = p .. 'usage:' .. row[1]
  for field, value in pairs(row[2]) do redis.call('HINCRBY', k, field, value) end
  redis.call('ZADD', minutes, row[1], row[1])
end
if #batch.recent > 0 then
  redis.call('LPUSH', p .. 'recent', unpack(batch.recent))
  redis.call('LTRIM', p .. 'recent', 0, tonumber(ARGV[3]) - 1)
end
if batch.purge then
  local old = redis.call('ZRANGEBYSCORE', minutes, '-inf', '(' .. batch.purge)
  for _, minute in ipairs(old) do redis.call('DEL', p .. 'usage:' .. minute) end
  redis.call('ZREMRANGEBYSCORE', minutes, '-inf', '(' .. batch.purge)
end
return #batch.rows
"""


class RedisUsageStore:
    blocking = True  # a round trip: the usage writer group-commits on its greenlet
    cooperative = True  # …and calls it there, not on a thread (proxy.upstream.keeper.blocking)

    def __init__(self, state: StateConfig, health: StoreHealth | None = None, client: Any = None) -> None:
        self.state = state
        self.health = health or StoreHealth("redis")
        self.client = client if client is not None else connect(state)
        self._errors = unreachable_errors()
        self._add = self.client.register_script(_ADD)
        self.buffer = UsageBuffer()
        self.writer = uuid.uuid4().hex  # this store instance's batches are numbered under this name
        # With state.sentinel: batches written whose replication no replica has acknowledged yet,
        # oldest first, and whether a failed connection means they must be sent again.
        self._unconfirmed: list[Batch] = []
        self._resend = False
        self._warned_unconfirmed = False

    @property
    def overflow(self) -> int:
        return self.buffer.overflow

    def try_add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry]) -> bool:
        """Never at once: a round trip yields to other greenlets, so the writer's group commit
        (its own greenlet, calls on the caller's) is the way in."""
        return False

    def add(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry], purge_before: int | None = None) -> None:
        self.buffer.put(usage, recent, purge_before)
        while (self._resend or self.buffer.pending()) and self.health.may_try():
            try:
                if self._resend:  # the primary may have changed: what it never passed on goes again
                    for held in self._unconfirmed:
                        self._send(held)
                    self._resend = False
                batch = self.buffer.take()
                if batch is None:
                    break
                try:
                    self._write(batch)
                except self._errors:
                    # Sent, perhaps applied, answer lost: the same number again next time.
                    self.buffer.put_back(batch, in_doubt=True)
                    raise
            except self._errors as exc:
                self._resend = bool(self._unconfirmed)
                self.health.failed(exc)
                return
            self.health.ok()

    def buffered(self) -> int:
        return len(self.buffer)

    def _write(self, batch: Batch) -> None:
        self._send(batch)
        if self.state.sentinel is None:
            return
        # Done only once a replica has it too: a primary that dies before passing a batch on
        # would otherwise take acknowledged figures with it (replication is asynchronous). If it
        # dies during the wait, the connection error sends the batch back, and the promoted
        # replica, which never saw its number, applies it. A replica slower than the wait does
        # not hold usage back — the batch is on the primary, and counted — but the batch is kept
        # until a later wait succeeds (replication is in order: a later batch acknowledged means
        # every earlier one is too), and sent again, before anything newer, if the connection
        # fails meanwhile (the script skips a number the new primary has already seen).
        if int(self.client.execute_command("WAIT", 1, REPLICA_WAIT_MS)) >= 1:
            self._unconfirmed.clear()
            return
        self._unconfirmed.append(batch)
        if len(self._unconfirmed) > MAX_UNCONFIRMED:
            del self._unconfirmed[0]
            if not self._warned_unconfirmed:
                self._warned_unconfirmed = True
                log.warning("usage: no Redis replica acknowledges writes (WAIT 1 timed out %d times in a row); "
                            "figures written since are on the primary only until one does", MAX_UNCONFIRMED)

    def _send(self, batch: Batch) -> None:
        payload: dict[str, Any] = {"rows": [], "recent": [json.dumps(asdict(e)) for e in batch.recent]}
        if batch.purge_before is not None:
            payload["purge"] = str(batch.purge_before)
        for row in merged(batch.rows):
            dims = json.dumps([getattr(row, d) for d in DIMENSIONS], separators=(",", ":"))
            payload["rows"].append([str(row.minute), {f"{dims}|{name}": str(getattr(row, name))
                                                      for name in (*COUNTERS, *TIMINGS) if getattr(row, name)}])
        self._add(args=[self.state.prefix, json.dumps(payload), RECENT_CAP, self.writer, batch.seq, APPLIED_TTL])

    def query(self, query: UsageQuery) -> UsageAnswer:
        minutes_key = key(self.state, "usage-minutes")
        try:
            with self.client.pipeline(transaction=False) as pipe:
                listed: list[Any] = self.client.zrangebyscore(minutes_key, query.since, f"({query.until}")
                minutes = [int(m) for m in listed]
                for minute in minutes:
                    pipe.hgetall(key(self.state, "usage", str(minute)))
                found = pipe.execute()
        except self._errors as exc:
            self.health.failed(exc)
            raise _unavailable() from None
        self.health.ok()
        rows = MemoryUsageStore()  # the same aggregation as in memory, over the window's rows
        for minute, fields in zip(minutes, found, strict=True):
            by_dims: dict[bytes, UsageRow] = {}
            for field, value in fields.items():
                dims, _, name = field.rpartition(b"|")
                row = by_dims.get(dims)
                if row is None:
                    row = by_dims[dims] = _row(minute, dims)
                setattr(row, name.decode(), int(value))
            rows.add(list(by_dims.values()), [])
        return rows.query(query)

    def recent(self, limit: int) -> list[RecentEntry]:
        try:
            raw = self.client.lrange(key(self.state, "recent"), 0, limit - 1)
        except self._errors as exc:
            self.health.failed(exc)
            raise _unavailable() from None
        self.health.ok()
        return [RecentEntry(**json.loads(item)) for item in raw]


def _row(minute: int, dims: bytes) -> UsageRow:
    """A row (no counters yet) from a field's dimensions. Fields written before the price version
    (9 values) or the endpoint and served model (10) were dimensions are arrays short of them: the
    price version is then '', the endpoint the client protocol, the served model the model."""
    values = json.loads(dims)
    row = UsageRow(minute, *values)
    return row if len(values) == len(DIMENSIONS) else with_defaults(row)


def _unavailable() -> ProxyError:
    return ProxyError(503, "The shared state store (Redis) is unreachable, so usage figures cannot be read now; "
                           "requests go on and their usage is buffered until it returns. Try again shortly.",
                      "unavailable")
