"""One client request on its way through the proxy, as the relay and the codecs see it.

Owns the neutral description of "what the client asked for": its protocol, its parsed body,
the model name it used (which it must see again in every answer), whether it streams, the
client headers that matter to translation, the IR, decoded once and only when needed, and — for
a client API that keeps conversations on the server — the conversation state each attempt is
built from.
Pure data: must not import Flask or requests.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.config import Upstream
from proxy.ir.request import Request


class ConversationState(Protocol):
    """State a stateful client API keeps on the proxy between requests (Responses: stored responses,
    `previous_response_id`, `item_reference`). The relay asks it, for each attempt, which body the
    attempt is built from and which hook keeps the finished answer — the decision depends on the
    upstream and account the attempt is about to use."""

    def body_for(self, upstream: Upstream, account: str) -> dict[str, Any]: ...

    def keeper(self, upstream: Upstream, account: str,
               passthrough: bool) -> Callable[[dict[str, Any]], None] | None: ...

    def previous_account(self, upstream: str) -> str | None:
        """The account of `upstream` that served the turn this request continues, if the state knows."""


@dataclass
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
    # Called with the final response object when the answer completes (set per attempt from
    # `conversation`: it keeps the answer for the next turn).
    on_complete: Callable[[dict[str, Any]], None] | None = None
    # What the client encoder left out for this client, by what ("reasoning": 2), for the log line.
    dropped: dict[str, int] = field(default_factory=dict)
    # The path under the upstream's base URL when the request passes through to an upstream of the
    # client's protocol at another endpoint than the protocol's main one (Responses' `/responses/compact`);
    # None: the protocol's own path. A translated attempt always uses its upstream protocol's path.
    passthrough_path: str | None = None
