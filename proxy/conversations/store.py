"""The Responses API's response store: completed responses kept so that `previous_response_id`
continues a conversation, `item_reference` resolves, and `GET / DELETE /v1/responses/{id}` work.

Owns a bounded, expiring, thread- and greenlet-safe map from response id to what that response
was: its response object (as the client received it), the input items the request added, the id
of the response it continued, and its origin — which upstream and account answered it, and whether
that upstream keeps the response itself (so that only it may be sent the id as it is). A
conversation is rebuilt by following the links, so a long chain costs memory linear in its length.
Items are also indexed by id for `item_reference`, with the response that holds each.

In memory and per worker process: with several gunicorn workers, a follow-up that lands on another
worker does not find its predecessor (run one worker, the default, when clients rely on this) —
unless the state lives in Redis, where `redis_store.SharedResponseStore` extends this one.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.protocols.responses.compaction import Sealer


@dataclass(frozen=True)
class Origin:
    """Who answered a stored response."""

    upstream: str  # the upstream's name in the config
    account: str  # the account id it answered with
    kept: bool  # that upstream stores the response too (a Responses upstream not told store: false)


@dataclass
class StoredResponse:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    previous_response_id: str | None
    origin: Origin | None = None
    stored_at: float = 0.0
    item_ids: list[str] = field(default_factory=list)
    # False: kept only so that later requests can continue from it (a WebSocket turn under
    # `store: false`); GET /v1/responses/{id} does not serve it.
    retrievable: bool = True

    def kept_by(self, upstream: str, account: str) -> bool:
        """Whether this upstream account holds the response itself: only then does its id mean
        anything there (an upstream's store is per account, as far as the proxy can know)."""
        return self.origin is not None and self.origin.kept and (self.origin.upstream, self.origin.account) == (
            upstream, account)


class ResponseStore:
    blocking = False  # in this worker's memory (SharedResponseStore: over the network)

    def __init__(self, max_entries: int = 1000, ttl: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic, sealer: Sealer | None = None) -> None:
        # The key to the conversation state the proxy hands to clients instead of keeping it:
        # compaction summaries (proxy.protocols.responses.compaction).
        self.sealer = sealer
        self.max_entries = max_entries
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._responses: OrderedDict[str, StoredResponse] = OrderedDict()
        self._items: dict[str, tuple[dict[str, Any], str]] = {}  # item id → the item, its response's id

    def put(self, response: dict[str, Any], input_items: list[dict[str, Any]],
            previous_response_id: str | None, origin: Origin | None = None, retrievable: bool = True) -> None:
        entry = StoredResponse(response, input_items, previous_response_id, origin, self._clock(),
                               retrievable=retrievable)
        with self._lock:
            self._drop(response["id"])
            for item in [*input_items, *response.get("output", [])]:
                if isinstance(item.get("id"), str):
                    self._items[item["id"]] = (item, response["id"])
                    entry.item_ids.append(item["id"])
            self._responses[response["id"]] = entry
            while len(self._responses) > self.max_entries:
                self._drop(next(iter(self._responses)))

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            entry = self._responses.get(response_id)
            if entry is None:
                return None
            if self._clock() - entry.stored_at > self.ttl:
                self._drop(response_id)
                return None
            return entry

    def delete(self, response_id: str) -> bool:
        with self._lock:
            return self._drop(response_id)

    def item(self, item_id: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._items.get(item_id)
        return found[0] if found is not None else None

    def holder(self, item_id: str) -> StoredResponse | None:
        """The stored response an item belongs to (its input or its output)."""
        with self._lock:
            found = self._items.get(item_id)
        return self.get(found[1]) if found is not None else None

    def conversation(self, response_id: str) -> list[dict[str, Any]] | None:
        """Every item of the chain ending at `response_id`, oldest first: each response's input
        items then its output items. None if the response (or one it continued) is gone."""
        chain: list[StoredResponse] = []
        seen: set[str] = set()
        current: str | None = response_id
        while current is not None and current not in seen:
            seen.add(current)
            entry = self.get(current)
            if entry is None:
                return None
            chain.append(entry)
            current = entry.previous_response_id
        items: list[dict[str, Any]] = []
        for entry in reversed(chain):
            items += entry.input_items
            items += entry.response.get("output", [])
        return items

    def _drop(self, response_id: str) -> bool:
        entry = self._responses.pop(response_id, None)
        if entry is None:
            return False
        for item_id in entry.item_ids:
            self._items.pop(item_id, None)
        return True
