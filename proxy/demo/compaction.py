"""The demo upstream's own compaction, as OpenAI's Responses API does it: `POST /v1/responses/compact`
(v1) answers `{"output": [...]}` — the user's messages, then one `compaction` item — and a
`/v1/responses` request whose last input item is `{"type": "compaction_trigger"}` (v2) streams
exactly one `compaction` item, then `response.completed`.

The demo's `encrypted_content` is its own opaque token (`demo-compaction.` and the number of items
it summarised), so tests can tell an upstream's compaction passed through from one the proxy made.
Only the Responses face compacts; the Chat and Messages faces do not know these requests, as the
real APIs do not. Pure: must not import Flask, requests or gevent.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

PREFIX = "demo-compaction."
USAGE = {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 30,
         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 150}


def triggered(body: Any) -> bool:
    items = body.get("input") if isinstance(body, dict) else None
    return isinstance(items, list) and bool(items) and isinstance(items[-1], dict) and \
        items[-1].get("type") == "compaction_trigger"


def _item(body: dict[str, Any]) -> dict[str, Any]:
    summarised = len(body.get("input") or [])
    return {"id": "cmp_" + uuid.uuid4().hex, "type": "compaction", "encrypted_content": f"{PREFIX}{summarised}"}


def compact_answer(body: dict[str, Any]) -> dict[str, Any]:
    users = [i for i in body.get("input") or [] if isinstance(i, dict) and i.get("role") == "user"]
    return {"id": "resp_" + uuid.uuid4().hex, "object": "response.compaction", "created_at": int(time.time()),
            "output": [*users, _item(body)], "usage": USAGE}


def trigger_stream(body: dict[str, Any]) -> list[bytes]:
    response: dict[str, Any] = {"id": "resp_" + uuid.uuid4().hex, "object": "response", "created_at": int(time.time()),
                "status": "in_progress", "model": body.get("model"), "output": [], "usage": None}
    item = _item(body)
    done = {**response, "status": "completed", "output": [item], "usage": USAGE}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": response}), ("response.in_progress", {"response": response}),
        ("response.output_item.added", {"output_index": 0, "item": item}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": done})]
    return [f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': n, **fields})}\n\n".encode()
            for n, (kind, fields) in enumerate(events)]


def expand(body: Any) -> Any:
    """The demo's compaction items in a request's input, read back as the model would: a message
    saying what was summarised (so the demo model continues from the summary, not from the user's
    earlier request that the summary answered)."""
    items = body.get("input") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return body
    expanded = []
    for item in items:
        content = item.get("encrypted_content") if isinstance(item, dict) else None
        if isinstance(content, str) and item.get("type") == "compaction" and content.startswith(PREFIX):
            summary = f"Summary of the conversation so far: {content[len(PREFIX):]} earlier items were compacted."
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": summary}]}
        expanded.append(item)
    return {**body, "input": expanded}
