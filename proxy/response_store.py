"""The Responses API's response store: completed responses kept so that `previous_response_id`
continues a conversation, `item_reference` resolves, and `GET / DELETE /v1/responses/{id}` work.

Owns a bounded, expiring, thread- and greenlet-safe map from response id to what that response
was: its response object (as the client received it), the input items the request added, and the
id of the response it continued. A conversation is rebuilt by following those links, so a long
chain costs memory linear in its length. Items are also indexed by id for `item_reference`.

In memory and per worker process: with several gunicorn workers, a follow-up that lands on another
worker does not find its predecessor (run one worker, the default, when clients rely on this).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StoredResponse:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    previous_response_id: str | None
    stored_at: float = 0.0
    item_ids: list[str] = field(default_factory=list)


class ResponseStore:
    def __init__(self, max_entries: int = 1000, ttl: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._responses: OrderedDict[str, StoredResponse] = OrderedDict()
        self._items: dict[str, dict[str, Any]] = {}

    def put(self, response: dict[str, Any], input_items: list[dict[str, Any]],
            previous_response_id: str | None) -> None:
        entry = StoredResponse(response, input_items, previous_response_id, self._clock())
        with self._lock:
            self._drop(response["id"])
            for item in [*input_items, *response.get("output", [])]:
                if isinstance(item.get("id"), str):
                    self._items[item["id"]] = item
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
            return self._items.get(item_id)

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
