"""One client request on its way through the proxy, as the relay and the codecs see it.

Owns the neutral description of "what the client asked for": its protocol, its parsed body,
the model name it used (which it must see again in every answer), whether it streams, the
client headers that matter to translation, the IR (the relay decodes it once, when an attempt
first translates, and hands each attempt a copy of the exchange that carries it), and — for a
client API that keeps conversations on the server — the conversation state each attempt is built
from. An `Exchange` is immutable: what an attempt finds out (the final answer, what the encoder
left out) comes back as values (`proxy.protocols.codec.Answer`, a stream relay's `final` and
`dropped`), never written into it.
Pure data: must not import Flask or requests.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.config import Upstream
from proxy.ir.request import Request

EMBEDDINGS = "embeddings"  # Exchange.operation of an embeddings request (completion requests: "completion")


@dataclass(frozen=True)
class Compaction:
    """The answer is a compaction the proxy performs (a summary, sealed): what the client's codec
    needs to make it. `sealer` is the protocol's sealing key (opaque here); `replaces_conversation`:
    the answer is the compacted conversation itself, not a response (Responses' `/responses/compact`)."""

    sealer: Any
    replaces_conversation: bool


class ConversationState(Protocol):
    """State a stateful client API keeps on the proxy between requests (Responses: stored responses,
    `previous_response_id`, `item_reference`; kept by `proxy.conversations`). The relay asks it, for
    each attempt, which body the attempt is built from, and hands it the finished answer to keep —
    both depend on the upstream and account the attempt used."""

    @property
    def compaction(self) -> Compaction | None:
        """Set when the answer is a compaction the proxy performs (the client's codec makes it)."""

    def body_for(self, upstream: Upstream, account: str) -> dict[str, Any]: ...

    def keep(self, final: dict[str, Any], upstream: Upstream, account: str, passthrough: bool) -> None:
        """Keep the finished response object the client got, for the next turn (may wait on a store:
        called where waiting is allowed). `passthrough`: it is the upstream's own (its id)."""

    def previous_account(self, upstream: str) -> str | None:
        """The account of `upstream` that served the turn this request continues, if the state knows."""


@dataclass(frozen=True)
class Exchange:
    protocol: str  # the client's protocol, by its name (chat_completions | messages | responses | …)
    body: dict[str, Any]
    model: str
    stream: bool
    request_id: str
    headers: dict[str, str] = field(default_factory=dict)  # lower-cased client headers we may forward
    # Every header of the client's request, names lower-cased, for what names its conversation (affinity).
    request_headers: Mapping[str, str] = field(default_factory=dict)
    client_socket: socket.socket | None = None
    ir: Request | None = None
    conversation: ConversationState | None = None
    # The path under the upstream's base URL when the request passes through to an upstream of the
    # client's protocol at another endpoint than the protocol's main one (Responses' `/responses/compact`);
    # None: the protocol's own path. A translated attempt always uses its upstream protocol's path.
    passthrough_path: str | None = None
    # What is asked: a completion (chat, messages, responses, generateContent) or `embeddings`.
    operation: str = "completion"
