"""The Responses store shared across hosts (`state: {backend: redis}`): a `ResponseStore` whose
entries also live in Redis, so a `previous_response_id` or an `item_reference` issued by one host
(or worker) resolves on any other.

Owns the Redis side of the store. Under the configured prefix: `resp:<id>` one JSON document per
response (what `StoredResponse` holds, with its origin), `item:<id>` the id of the response that
holds an item, both expiring after `response_store.ttl` (PX, set on write); `resp-order` a sorted
set of ids by when they were stored, trimmed to `response_store.max_entries` (the oldest are
dropped first, as in memory). A write is one MULTI transaction.

Redis is read first: what it says is what every host sees (a response deleted through another host
is gone here too). Every entry is also kept in this worker's memory (the base class), which answers
when Redis cannot be reached — a conversation continued on the same worker goes on while Redis is
away — and for entries stored here while it was away, which Redis never got.
Pure of Flask, requests and gevent: redis-py's sockets are gevent's under the worker, so a call yields, never blocks.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from typing import Any

from proxy.config.state import StateConfig
from proxy.conversations.store import Origin, ResponseStore, StoredResponse
from proxy.state.health import StoreHealth
from proxy.state.redis_connection import connect, key, unreachable_errors

log = logging.getLogger("proxy.responses")
_AWAY = object()  # what `_redis` answers when Redis could not be asked

_TRIM = """
local n = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[2])
if n <= 0 then return 0 end
local popped = redis.call('ZPOPMIN', KEYS[1], n)
for i = 1, #popped, 2 do redis.call('DEL', ARGV[1] .. popped[i]) end
return n
"""


class SharedResponseStore(ResponseStore):
    blocking = True  # a put is a round trip to Redis…
    cooperative = True  # …over redis-py's sockets, which yield under gevent (proxy.upstream.keeper.blocking)

    def __init__(self, state: StateConfig, max_entries: int = 1000, ttl: float = 3600.0,
                 health: StoreHealth | None = None, client: Any = None) -> None:
        super().__init__(max_entries, ttl)
        self.state = state
        self.health = health or StoreHealth("redis")
        self.client = client if client is not None else connect(state)
        self._errors = unreachable_errors()
        self._trim = self.client.register_script(_TRIM)
        self._unshared: set[str] = set()  # ids stored here while Redis was away: only this worker has them

    def put(self, response: dict[str, Any], input_items: list[dict[str, Any]],
            previous_response_id: str | None, origin: Origin | None = None, retrievable: bool = True) -> None:
        super().put(response, input_items, previous_response_id, origin, retrievable)
        self._unshared.add(response["id"])  # until Redis has it
        if not self.health.may_try():
            return
        ttl_ms = max(1, int(self.ttl * 1000))
        document = json.dumps({"response": response, "input_items": input_items,
                               "previous_response_id": previous_response_id,
                               "origin": asdict(origin) if origin is not None else None,
                               "retrievable": retrievable})
        try:
            pipe = self.client.pipeline(transaction=True)
            pipe.set(key(self.state, "resp", response["id"]), document, px=ttl_ms)
            for item in [*input_items, *response.get("output", [])]:
                if isinstance(item.get("id"), str):
                    pipe.set(key(self.state, "item", item["id"]), response["id"], px=ttl_ms)
            order = key(self.state, "resp-order")
            pipe.zadd(order, {response["id"]: time.time()})
            pipe.pexpire(order, ttl_ms)
            self._trim(keys=[order], args=[key(self.state, "resp:"), self.max_entries], client=pipe)
            pipe.execute()
        except self._errors as exc:
            self.health.failed(exc)
            log.warning("responses: %s kept in this worker only (the state store is unreachable)", response["id"])
            return
        self.health.ok()
        self._unshared.discard(response["id"])

    def get(self, response_id: str) -> StoredResponse | None:
        raw = self._redis("get", key(self.state, "resp", response_id))
        if isinstance(raw, bytes):
            return _entry(json.loads(raw))
        if raw is _AWAY or response_id in self._unshared:
            return super().get(response_id)
        return None  # Redis answered: gone (expired, or deleted through another host)

    def delete(self, response_id: str) -> bool:
        self._unshared.discard(response_id)
        local = super().delete(response_id)
        removed = self._redis("delete", key(self.state, "resp", response_id))
        self._redis("zrem", key(self.state, "resp-order"), response_id)
        return local or bool(removed)

    def item(self, item_id: str) -> dict[str, Any] | None:
        holder = self.holder(item_id)
        if holder is None:
            return None
        for item in [*holder.input_items, *holder.response.get("output", [])]:
            if item.get("id") == item_id:
                return dict(item)
        return None

    def holder(self, item_id: str) -> StoredResponse | None:
        response_id = self._redis("get", key(self.state, "item", item_id))
        if isinstance(response_id, bytes):
            return self.get(response_id.decode())
        local = super().holder(item_id)
        if response_id is _AWAY or (local is not None and local.response["id"] in self._unshared):
            return local
        return None

    def _redis(self, command: str, *args: Any) -> Any:
        """One command's answer; `_AWAY` when Redis is away (the local copy answers instead)."""
        if not self.health.may_try():
            return _AWAY
        try:
            result = getattr(self.client, command)(*args)
        except self._errors as exc:
            self.health.failed(exc)
            return _AWAY
        self.health.ok()
        return result


def _entry(document: dict[str, Any]) -> StoredResponse:
    origin = document.get("origin")
    entry = StoredResponse(document["response"], document["input_items"], document.get("previous_response_id"),
                           Origin(**origin) if origin else None, time.monotonic(),
                           retrievable=document.get("retrievable", True))
    entry.item_ids = [i["id"] for i in [*entry.input_items, *entry.response.get("output", [])]
                      if isinstance(i.get("id"), str)]
    return entry
