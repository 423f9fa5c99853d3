"""Conversation state the proxy keeps between a client's requests, for client APIs that keep it on
the server (Responses: stored responses, `previous_response_id`, `item_reference`, compaction).

Owns the state and where it lives: the request's conversation (`responses`: which body each attempt
is built from, keeping every finished answer with the upstream account that gave it), the stores
it is kept in (`store`: this worker's memory; `redis_store`: shared by every worker and host), the
key that seals the proxy's compaction summaries (`compaction_key`: created by the master before
workers fork) and deleting the copy an upstream keeps of a response (`upstream_copies`).
The edge asks `for_request` once per request; the relay sees the result only as the
`ConversationState` of proxy.protocols.exchange — the codecs it uses are the protocols' own, pure.
"""

from __future__ import annotations

from typing import Any

from proxy.conversations.responses import ResponsesConversation
from proxy.conversations.store import ResponseStore
from proxy.protocols.codec import ClientSide


def for_request(client: ClientSide, body: dict[str, Any], store: ResponseStore, *, keep_unstored: bool = False,
                compact: bool = False) -> ResponsesConversation | None:
    """The conversation state of one request of `client`'s protocol, or None when that protocol
    keeps none on the proxy. `keep_unstored`: keep the answer even under `store: false` (a
    WebSocket's next turn chains on it); `compact`: the request asks for the conversation compacted."""
    if not client.keeps_conversations:
        return None
    return ResponsesConversation(body, store, keep_unstored=keep_unstored, compact=compact)


__all__ = ["ResponseStore", "ResponsesConversation", "for_request"]
