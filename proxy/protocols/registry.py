"""The protocols the proxy speaks, by name: client sides by endpoint protocol, upstream sides and
passthroughs by the config's `protocol:` value. The relay looks codecs up here and nowhere else.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from proxy.protocols import chat_completions, messages, responses
from proxy.protocols.codec import ClientSide, SameWire, UpstreamSide

CLIENTS: dict[str, ClientSide] = {
    "chat_completions": chat_completions.CLIENT,
    "messages": messages.CLIENT,
    "responses": responses.CLIENT,
}
UPSTREAMS: dict[str, UpstreamSide] = {
    "openai": chat_completions.UPSTREAM,
    "anthropic": messages.UPSTREAM,
    "responses": responses.UPSTREAM,
}
SAME_WIRE: dict[str, SameWire] = {
    "openai": chat_completions.SAME_WIRE,
    "anthropic": messages.SAME_WIRE,
    "responses": responses.SAME_WIRE,
}
