"""Server-side conversation state for `/v1/responses`: expanding `previous_response_id` and
`item_reference` from the response store, and shaping this request's input for storage.

Owns what a stateless upstream cannot do. The Vercel AI SDK (store on by default) sends earlier
assistant output as `{"type": "item_reference", "id": …}`; openai-python users chain turns with
`previous_response_id`. Both are resolved here into items by value, or answered with a clear error
— silently dropping them would erase the assistant's side of the conversation.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from proxy.errors import ProxyError
from proxy.response_store import ResponseStore


@dataclass
class Conversation:
    items: list[dict[str, Any]]  # everything the model should see, oldest first
    new_items: list[dict[str, Any]]  # this request's own input, by value, with ids: what is stored


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's `input` as items (a string is one user message)."""
    inp = body.get("input")
    if inp is None:
        return []
    if isinstance(inp, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": inp}]}]
    return [dict(item) for item in inp]


def expand(body: dict[str, Any], store: ResponseStore) -> Conversation:
    earlier: list[dict[str, Any]] = []
    previous = body.get("previous_response_id")
    if previous:
        found = store.conversation(previous)
        if found is None:
            raise ProxyError(404, f"Previous response with id {previous!r} not found (this proxy keeps responses "
                                  f"for {store.ttl:g}s, at most {store.max_entries}).", "not_found",
                             code="previous_response_not_found", param="previous_response_id")
        earlier = found
    new_items = []
    for i, item in enumerate(input_items(body)):
        if item.get("type") == "item_reference":
            stored = store.item(str(item.get("id")))
            if stored is None:
                raise ProxyError(400, f"input[{i}]: item_reference {item.get('id')!r} is not in this proxy's "
                                      "response store (it keeps items of stored responses only, and not "
                                      "forever); send the item by value instead.", "invalid_request",
                                 param=f"input[{i}]")
            item = dict(stored)
        elif (item.get("type") or "message") == "message" and not item.get("id"):
            item = {"type": "message", **item, "id": "msg_" + uuid.uuid4().hex}
        new_items.append(item)
    return Conversation(items=earlier + new_items, new_items=new_items)
