"""Server-side conversation state for `/v1/responses`: which body each attempt is built from, and
keeping every answer so the next turn may land on any upstream.

Owns what upstreams cannot do for each other. openai-python users chain turns with
`previous_response_id`; the Vercel AI SDK (store on by default) sends earlier output as
`{"type": "item_reference", "id": …}`. A Responses upstream resolves those itself only for
responses it served and kept, with the account that served them; for every other attempt the
references are resolved here, from the proxy's store, into items by value — silently dropping them
would erase the assistant's side of the conversation — or answered with a clear error. Every
finished answer, passed through or translated, is kept (unless the client sent `store: false`) with the
upstream and account that gave it.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import uuid
from typing import Any

from proxy.config import Upstream
from proxy.conversations.store import Origin, ResponseStore
from proxy.errors import ProxyError
from proxy.ir.reasoning import is_minted
from proxy.protocols.exchange import Compaction
from proxy.protocols.responses import NAME as RESPONSES
from proxy.protocols.responses import compaction
from proxy.protocols.responses.request import input_items


class ResponsesConversation:
    """One `/v1/responses` request's conversation, as each attempt of the relay needs it."""

    def __init__(self, body: dict[str, Any], store: ResponseStore, keep_unstored: bool = False,
                 compact: bool = False) -> None:
        self.body = body
        self.store = store
        # Compaction (proxy.protocols.responses.compaction): `compact` is POST /v1/responses/compact
        # (v1); a trigger as the last input item is v2. Either way a blob of ours in the input that
        # does not open is refused now, before any upstream is asked anything.
        own: list[Any] = body["input"] if isinstance(body.get("input"), list) else []
        self.compact = compact
        self.compaction_wanted = compact or compaction.wants_compaction(own)
        if store.sealer is not None:
            compaction.check_sealed(own, store.sealer)
        # Over a WebSocket, a turn chains on the previous one by `previous_response_id` even under
        # `store: false` (Codex sends store: false): the answer is kept for that, but not served by
        # GET /v1/responses/{id}, as the real API keeps it only for the connection's next turn.
        self.keep_unstored = keep_unstored
        self._own: list[dict[str, Any]] | None = None  # this request's input, by value, with ids

    # ------------------------------------------------------------ the relay's step

    def body_for(self, upstream: Upstream, account: str) -> dict[str, Any]:
        """The client's body as an attempt on this upstream account must be built from: as it is
        when the upstream can resolve everything it refers to, else with the whole conversation
        expanded from the store and no `previous_response_id`."""
        if upstream.protocol == RESPONSES and self._resolvable_by(upstream.name, account):
            return self._compaction_for(self.body, upstream.protocol)
        body = {key: value for key, value in self.body.items() if key != "previous_response_id"}
        items = self.items()
        body["input"] = replayable(items) if upstream.protocol == RESPONSES else items
        return self._compaction_for(body, upstream.protocol)

    def _compaction_for(self, body: dict[str, Any], protocol: str) -> dict[str, Any]:
        """The body with compaction done as this upstream can: its own if it is a Responses
        upstream, else the proxy's (a summarisation request, no tool calls); the proxy's sealed
        summaries expanded whichever it is."""
        items = body.get("input")
        if not isinstance(items, list) or not (self.compaction_wanted or any(
                isinstance(i, dict) and i.get("type") in (compaction.ITEM, compaction.TRIGGER) for i in items)):
            return body
        sealer = self.store.sealer
        if sealer is None:
            raise ProxyError(500, "This proxy has no compaction key configured (compaction.key).", "api_error")
        body = {**body, "input": compaction.for_upstream(items, protocol, sealer, summarise=self.compact)}
        if self.compaction_wanted and protocol != RESPONSES and body.get("tools"):
            # The summary is the answer. (Only beside tools: OpenAI refuses a tool_choice without them;
            # the tools stay, since Anthropic refuses tool_use blocks in a history without them.)
            body["tool_choice"] = "none"
        return body

    @property
    def compaction(self) -> Compaction | None:
        """Set when the answer is a compaction the proxy performs, with the key that seals it."""
        sealer = self.store.sealer
        return Compaction(sealer, self.compact) if self.compaction_wanted and sealer is not None else None

    def keep(self, final: dict[str, Any], upstream: Upstream, account: str, passthrough: bool) -> None:
        """Store the finished response object the client got — not under `store: false` (then
        nothing is kept, as the real API keeps nothing). `passthrough`: the client got the
        upstream's own response (its id), which a Responses upstream keeps unless the response
        says `store: false`. May wait on a store over the network: the relay calls it where that
        is allowed (a stream's end-of-stream callback, in its own greenlet)."""
        unstored = self.body.get("store", True) is False
        if (unstored and not self.keep_unstored) or self.compact:  # v1's answer is not a response
            return
        kept = passthrough and upstream.protocol == RESPONSES and final.get("store") is not False
        self.store.put(final, self._items_of_this_request(strict=False), self.body.get("previous_response_id"),
                       Origin(upstream.name, account, kept), retrievable=not unstored)

    def keep_unanswered(self, final: dict[str, Any]) -> None:
        """Keep a response no upstream saw (a WebSocket warm-up), so later turns can chain on it."""
        if self.body.get("store", True) is False and not self.keep_unstored:
            return
        self.store.put(final, self._items_of_this_request(strict=False), self.body.get("previous_response_id"),
                       None, retrievable=self.body.get("store", True) is not False)

    def previous_account(self, upstream: str) -> str | None:
        """The account of `upstream` that answered the response this request continues (its
        `previous_response_id`), for routing the turn back to it (its prompt cache is there)."""
        previous = self.body.get("previous_response_id")
        entry = self.store.get(previous) if isinstance(previous, str) and previous else None
        origin = entry.origin if entry is not None else None
        return origin.account if origin is not None and origin.upstream == upstream else None

    # ------------------------------------------------------------ expansion

    def items(self) -> list[dict[str, Any]]:
        """Everything the model should see, oldest first: the stored chain, then this input."""
        earlier: list[dict[str, Any]] = []
        previous = self.body.get("previous_response_id")
        if previous:
            found = self.store.conversation(previous)
            if found is None:
                # The real API's answer for an id it does not hold (expired, deleted, or store: false).
                raise ProxyError(400, f"Previous response with id {previous!r} not found (this proxy keeps "
                                      f"responses for {self.store.ttl:g}s, at most {self.store.max_entries}; "
                                      "a response created with store: false is not kept).", "invalid_request",
                                 code="previous_response_not_found", param="previous_response_id")
            earlier = found
        return earlier + self._items_of_this_request(strict=True)

    def _items_of_this_request(self, strict: bool) -> list[dict[str, Any]]:
        """This request's input by value: item references resolved from the store, messages given
        an id so later requests can refer to them. `strict`: a reference the store does not have is
        an error (else it is kept as it is: the upstream resolved it)."""
        if self._own is None:
            own = []
            for item in input_items(self.body):
                if item.get("type") == "item_reference":
                    stored = self.store.item(str(item.get("id")))
                    if stored is not None:
                        item = dict(stored)
                elif (item.get("type") or "message") == "message" and not item.get("id"):
                    item = {"type": "message", **item, "id": "msg_" + uuid.uuid4().hex}
                own.append(item)
            self._own = own
        if strict:
            for i, item in enumerate(self._own):
                if item.get("type") == "item_reference":
                    raise ProxyError(400, f"input[{i}]: item_reference {item.get('id')!r} is not in this proxy's "
                                          "response store (it keeps items of stored responses only, and not "
                                          "forever); send the item by value instead.", "invalid_request",
                                     param=f"input[{i}]")
        return self._own

    def _resolvable_by(self, upstream: str, account: str) -> bool:
        """Whether every reference in the body means something to this upstream account: each one
        the proxy knows is a response (or an output item of one) that account served and kept.
        One the proxy does not know goes up as it is, for the upstream to resolve or refuse."""
        previous = self.body.get("previous_response_id")
        if previous:
            entry = self.store.get(previous)
            if entry is not None and not entry.kept_by(upstream, account):
                return False
        inp = self.body.get("input")
        for item in inp if isinstance(inp, list) else []:
            if isinstance(item, dict) and item.get("type") == "item_reference":
                holder = self.store.holder(str(item.get("id")))
                if holder is not None and not (holder.kept_by(upstream, account) and any(
                        out.get("id") == item.get("id") for out in holder.response.get("output", []))):
                    return False
        return True


def replayable(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored items as a Responses upstream that did not keep them takes them by value: without item
    ids, which it refuses when it holds no such item; reasoning only with an upstream's own
    encrypted_content (it cannot replay a summary alone, nor a token the proxy made), keeping the
    id the API requires on a reasoning item; and no references it could not resolve."""
    out = []
    for item in items:
        itype = item.get("type")
        if itype == "item_reference":
            continue
        if itype == "reasoning":
            encrypted = item.get("encrypted_content")
            if isinstance(encrypted, str) and encrypted and not is_minted(encrypted):
                out.append(item)
            continue
        out.append({key: value for key, value in item.items() if key != "id"})
    return out
