"""The demo upstream's other faces: the same simulated model behind `POST /v1/messages` (an
Anthropic-protocol upstream), for trying and testing `protocol: anthropic` upstreams with no key.

Owns turning a request of that protocol into the Chat body the scenarios understand, and the
scenario's Chat chunks into that protocol's stream or whole answer. It reuses the proxy's own
codecs (request decoder → IR → Chat; Chat chunks → IR → client encoder), which the golden and SDK
tests check independently. Thinking blocks get a signature of the demo's own ("demo-sig.…"), not
one the proxy would mint, so a client replaying it looks exactly like one replaying a real
Anthropic signature — and the proxy must send it back upstream intact.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from proxy.config import ReasoningOptions, Upstream
from proxy.ir.events import BlockStart, BlockStop, Delta, Event, Signature
from proxy.ir.request import ReasoningPart
from proxy.ir.tokens import estimate_input_tokens
from proxy.protocols.chat_completions import response as chat_response
from proxy.protocols.chat_completions import upstream_request as chat_request
from proxy.protocols.chat_completions.stream_decode import ChatStreamDecoder
from proxy.protocols.messages import request as messages_request
from proxy.protocols.messages import response as messages_response
from proxy.protocols.messages.stream_encode import MessagesStreamEncoder
from proxy.sse import SSEParser

_AS_CHAT = Upstream(name="demo", protocol="openai", base_url="", accounts=(),
                    reasoning=ReasoningOptions(control="reasoning_effort"))


def demo_signature(thinking: str) -> str:
    return "demo-sig." + base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def messages_to_chat(body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """An Anthropic request as the Chat body the scenarios read, and its estimated input tokens."""
    ir = messages_request.decode(body)
    return chat_request.encode(ir, str(body.get("model") or "demo-model"), _AS_CHAT), estimate_input_tokens(ir)


def chat_to_message(completion: dict[str, Any], model: str) -> dict[str, Any]:
    """A whole Chat completion as an Anthropic Message."""
    resp = chat_response.decode(completion)
    for part in resp.output:
        if isinstance(part, ReasoningPart):
            part.signature = demo_signature(part.text)
    return messages_response.encode(resp, model)


class MessagesStreamWriter:
    """Stands in for the HTTP writer while a scenario runs: the Chat SSE it is given goes out as
    an Anthropic stream. Everything else (start, end, drop, peer checks) is the real writer's."""

    def __init__(self, writer: Any, model: str, input_tokens: int) -> None:
        self._writer = writer
        self._parser = SSEParser()
        self._decoder = ChatStreamDecoder(expect_usage=True)
        self._encoder = MessagesStreamEncoder(model, input_tokens)  # message_start carries the prompt size
        self._thinking: list[str] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)

    def send(self, data: bytes) -> None:
        for sse in self._parser.feed(data):
            self._emit(self._decoder.feed(sse))

    def end(self) -> None:
        self._emit(self._decoder.close())
        self._writer.end()

    def _emit(self, events: list[Event]) -> None:
        for ev in events:
            for signed in self._sign(ev):
                for frame in self._encoder.encode(signed):
                    self._writer.send(frame)

    def _sign(self, ev: Event) -> list[Event]:
        """Add the signature a real Anthropic thinking block ends with."""
        if isinstance(ev, BlockStart):
            self._thinking = [] if isinstance(ev.part, ReasoningPart) else None
        elif isinstance(ev, Delta) and self._thinking is not None:
            self._thinking.append(ev.text)
        elif isinstance(ev, BlockStop) and self._thinking is not None:
            signature = demo_signature("".join(self._thinking))
            self._thinking = None
            return [Signature(signature=signature), ev]
        return [ev]
