"""The demo upstream's other faces: the same simulated model behind `POST /v1/messages` (an
Anthropic-protocol upstream) and `POST /v1/responses` (a Responses-protocol upstream), for trying
and testing `protocol: messages` and `protocol: responses` upstreams with no key.

Owns turning a request of those protocols into the Chat body the scenarios understand (through the
proxy's request decoder and Chat request encoder: the scenario only reads directives, messages and
tools from it), and running the scenario's Chat chunks through that protocol's writer. The writers
(proxy/demo/messages_face.py, proxy/demo/responses_face.py) are templates of the demo's own, not
the proxy's encoders, so a shared bug cannot cancel out between the proxy and the upstream its
tests run against.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.config import ReasoningOptions, Upstream
from proxy.demo import messages_face, responses_face
from proxy.demo.prompt_cache import PromptCache
from proxy.ir.request import Request
from proxy.ir.response import ErrorInfo
from proxy.ir.tokens import estimate_input_tokens
from proxy.protocols.chat_completions import upstream_request as chat_request
from proxy.protocols.messages import request as messages_request
from proxy.protocols.messages.errors import error_body as messages_error_body
from proxy.protocols.openai_errors import error_body as openai_error_body
from proxy.protocols.responses import request as responses_request
from proxy.protocols.responses.request import input_items
from proxy.protocols.sse import SSEParser

_AS_CHAT = Upstream(name="demo", protocol="openai", base_url="", accounts=(),
                    reasoning=ReasoningOptions(control="reasoning_effort"))


class Face:
    """One protocol the demo model can be spoken to in."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.model = str(body.get("model") or "demo-model")
        self.ir = self.decode(body)

    def decode(self, body: dict[str, Any]) -> Request:
        raise NotImplementedError

    def use_cache(self, cache: PromptCache, key: str) -> None:
        """Read and write the account's prompt cache as this protocol's upstream would (none: no cache)."""

    def chat_body(self) -> dict[str, Any]:
        """The request as the Chat body the scenarios read."""
        return chat_request.encode(self.ir, self.model, _AS_CHAT)

    def whole(self, completion: dict[str, Any]) -> dict[str, Any]:
        """The scenario's whole Chat completion in this protocol."""
        raise NotImplementedError

    def stream(self, write: Any) -> Any:
        """A writer with `chunk(dict)` and `end()` that sends the scenario's chunks in this protocol."""
        raise NotImplementedError

    @staticmethod
    def error_body(info: ErrorInfo) -> dict[str, Any]:
        return openai_error_body(info)


class MessagesFace(Face):
    cache = (0, 0)  # prompt-cache tokens (read, write), once `use_cache` has looked

    def decode(self, body: dict[str, Any]) -> Request:
        messages_request.validate(body)
        return messages_request.decode(body)

    def use_cache(self, cache: PromptCache, key: str) -> None:
        """Anthropic caches what `cache_control` marks, top level or on blocks (proxy/demo/prompt_cache.py)."""
        self.cache = cache.anthropic(key, self.body, estimate_input_tokens(self.ir))

    def whole(self, completion: dict[str, Any]) -> dict[str, Any]:
        return messages_face.anthropic_message(completion, self.model, estimate_input_tokens(self.ir), self.cache)

    def stream(self, write: Any) -> Any:
        return messages_face.AnthropicStream(write, self.model, estimate_input_tokens(self.ir), self.cache)

    @staticmethod
    def error_body(info: ErrorInfo) -> dict[str, Any]:
        return messages_error_body(info)


class ResponsesFace(Face):
    def decode(self, body: dict[str, Any]) -> Request:
        responses_request.validate(body)
        return responses_request.decode(body, input_items(body))

    def whole(self, completion: dict[str, Any]) -> dict[str, Any]:
        return responses_face.responses_object(completion, self.body, self.model)

    def stream(self, write: Any) -> Any:
        return responses_face.ResponsesStream(write, self.body, self.model)


FACES: dict[str, type[Face]] = {"/messages": MessagesFace, "/responses": ResponsesFace}


class TranslatingWriter:
    """Stands in for the HTTP writer while a scenario runs: the Chat SSE it is given goes out in
    the face's protocol. Everything else (start, end, drop, peer checks) is the real writer's."""

    def __init__(self, writer: Any, face: Any) -> None:  # a Face, or anything with its `stream`
        self._writer = writer
        self._parser = SSEParser()
        self._stream = face.stream(writer.send)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)

    def send(self, data: bytes) -> None:
        for sse in self._parser.feed(data):
            if sse.data.strip() and sse.data.strip() != b"[DONE]":
                self._stream.chunk(json.loads(sse.data))

    def end(self) -> None:
        self._stream.end()
        self._writer.end()
