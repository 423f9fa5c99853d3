"""The demo upstream's other faces: the same simulated model behind `POST /v1/messages` (an
Anthropic-protocol upstream) and `POST /v1/responses` (a Responses-protocol upstream), for trying
and testing `protocol: anthropic` and `protocol: responses` upstreams with no key.

Owns turning a request of those protocols into the Chat body the scenarios understand, and the
scenario's Chat chunks into that protocol's stream or whole answer. It reuses the proxy's own
codecs (request decoder → IR → Chat; Chat chunks → IR → client encoder), which the golden and SDK
tests check independently. Reasoning gets opaque tokens of the demo's own — a thinking signature
"demo-sig.…", an encrypted_content "demo-enc.…" — never ones the proxy would mint, so a client
replaying them looks exactly like one replaying a real upstream's, and the proxy must send them
back intact.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from proxy.config import ReasoningOptions, Upstream
from proxy.ir.events import BlockStart, BlockStop, Delta, Event, Signature
from proxy.ir.request import ReasoningPart, Request
from proxy.ir.response import ErrorInfo, Response
from proxy.ir.tokens import estimate_input_tokens
from proxy.protocols import responses as responses_protocol
from proxy.protocols.chat_completions import response as chat_response
from proxy.protocols.chat_completions import upstream_request as chat_request
from proxy.protocols.chat_completions.errors import error_body as openai_error_body
from proxy.protocols.chat_completions.stream_decode import ChatStreamDecoder
from proxy.protocols.messages import request as messages_request
from proxy.protocols.messages import response as messages_response
from proxy.protocols.messages.errors import error_body as messages_error_body
from proxy.protocols.messages.stream_encode import MessagesStreamEncoder
from proxy.protocols.responses import request as responses_request
from proxy.protocols.responses import response as responses_response
from proxy.protocols.responses.conversation import input_items
from proxy.protocols.responses.stream_encode import ResponsesStreamEncoder
from proxy.sse import SSEParser
from proxy.transcode import StreamEncoder

_AS_CHAT = Upstream(name="demo", protocol="openai", base_url="", accounts=(),
                    reasoning=ReasoningOptions(control="reasoning_effort"))


def _digest(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def demo_signature(thinking: str) -> str:
    return "demo-sig." + _digest(thinking)


def demo_encrypted(reasoning: str) -> str:
    return "demo-enc." + _digest(reasoning)


class Face:
    """One protocol the demo model can be spoken to in."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.model = str(body.get("model") or "demo-model")
        self.ir = self.decode(body)

    def decode(self, body: dict[str, Any]) -> Request:
        raise NotImplementedError

    def chat_body(self) -> dict[str, Any]:
        """The request as the Chat body the scenarios read."""
        return chat_request.encode(self.ir, self.model, _AS_CHAT)

    def whole(self, completion: dict[str, Any]) -> dict[str, Any]:
        resp = chat_response.decode(completion)
        for part in resp.output:
            if isinstance(part, ReasoningPart):
                self.seal(part)
        return self.encode(resp)

    def encode(self, resp: Response) -> dict[str, Any]:
        raise NotImplementedError

    def seal(self, part: ReasoningPart) -> None:
        """Give a whole reasoning part the opaque token this protocol's upstream would."""
        raise NotImplementedError

    def token(self, reasoning: str) -> Signature:
        """The token a streamed reasoning block ends with."""
        raise NotImplementedError

    def stream_encoder(self) -> StreamEncoder:
        raise NotImplementedError

    @staticmethod
    def error_body(info: ErrorInfo) -> dict[str, Any]:
        return openai_error_body(info)


class MessagesFace(Face):
    def decode(self, body: dict[str, Any]) -> Request:
        messages_request.validate(body)
        return messages_request.decode(body)

    def encode(self, resp: Response) -> dict[str, Any]:
        return messages_response.encode(resp, self.model)

    def seal(self, part: ReasoningPart) -> None:
        part.signature = demo_signature(part.text)

    def token(self, reasoning: str) -> Signature:
        return Signature(signature=demo_signature(reasoning))

    def stream_encoder(self) -> StreamEncoder:
        return MessagesStreamEncoder(self.model, estimate_input_tokens(self.ir))  # message_start has the prompt size

    @staticmethod
    def error_body(info: ErrorInfo) -> dict[str, Any]:
        return messages_error_body(info)


class ResponsesFace(Face):
    def decode(self, body: dict[str, Any]) -> Request:
        responses_request.validate(body)
        return responses_request.decode(body, input_items(body))

    def encode(self, resp: Response) -> dict[str, Any]:
        return responses_response.encode(resp, self.body, self.model, responses_protocol.custom_tools(self.body),
                                         responses_protocol.include_encrypted(self.body))

    def seal(self, part: ReasoningPart) -> None:
        part.encrypted = demo_encrypted(part.text)

    def token(self, reasoning: str) -> Signature:
        return Signature(encrypted=demo_encrypted(reasoning))

    def stream_encoder(self) -> StreamEncoder:
        return ResponsesStreamEncoder(self.body, self.model, responses_protocol.custom_tools(self.body),
                                      responses_protocol.include_encrypted(self.body))


FACES: dict[str, type[Face]] = {"/messages": MessagesFace, "/responses": ResponsesFace}


class TranslatingWriter:
    """Stands in for the HTTP writer while a scenario runs: the Chat SSE it is given goes out in
    the face's protocol. Everything else (start, end, drop, peer checks) is the real writer's."""

    def __init__(self, writer: Any, face: Face) -> None:
        self._writer = writer
        self._face = face
        self._parser = SSEParser()
        self._decoder = ChatStreamDecoder(expect_usage=True)
        self._encoder = face.stream_encoder()
        self._reasoning: list[str] | None = None

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
            for sealed in self._seal(ev):
                for frame in self._encoder.encode(sealed):
                    self._writer.send(frame)

    def _seal(self, ev: Event) -> list[Event]:
        """End each reasoning block with the opaque token a real upstream sends."""
        if isinstance(ev, BlockStart):
            self._reasoning = [] if isinstance(ev.part, ReasoningPart) else None
        elif isinstance(ev, Delta) and self._reasoning is not None:
            self._reasoning.append(ev.text)
        elif isinstance(ev, BlockStop) and self._reasoning is not None:
            token = self._face.token("".join(self._reasoning))
            self._reasoning = None
            return [token, ev]
        return [ev]
