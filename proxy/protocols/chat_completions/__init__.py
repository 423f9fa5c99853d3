"""The OpenAI Chat Completions protocol, `chat_completions`: the `/v1/chat/completions` endpoint and
`protocol: chat_completions` upstreams (OpenAI and every OpenAI-compatible server; `openai` is the
older name of the config value). Everything the proxy knows about this wire format is in this
package; this module puts it together as the protocol's `PROTOCOL`."""

from __future__ import annotations

from typing import Any

from proxy.config import Upstream
from proxy.errors import embedded_error
from proxy.ir.response import ErrorInfo
from proxy.protocols.chat_completions import embeddings, request, response, upstream_request
from proxy.protocols.chat_completions.passthrough import ChatPassthroughStream
from proxy.protocols.chat_completions.stream_decode import ChatStreamDecoder
from proxy.protocols.chat_completions.stream_encode import ChatStreamEncoder
from proxy.protocols.chat_completions.tool_pairs import repair_tool_pairs
from proxy.protocols.codec import Answer, ClientSide, Passthrough, Protocol, UpstreamSide
from proxy.protocols.exchange import Exchange
from proxy.protocols.openai_errors import error_body, relayed_error_body


def _client_wants_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def _prepare(ex: Exchange, client_body: dict[str, Any], model: str, upstream: Upstream) -> dict[str, Any]:
    body = dict(client_body)
    body["model"] = model
    body["messages"] = repair_tool_pairs(body["messages"])  # calls and results that lost their other half
    if ex.stream and upstream.stream_usage:
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return body


def _error_in_body(doc: dict[str, Any], secrets: tuple[str, ...]) -> ErrorInfo | None:
    """A 200 whose body is an error object instead of a completion (some compatible servers)."""
    return embedded_error(doc, secrets) if "choices" not in doc else None


CLIENT = ClientSide(
    path="/v1/chat/completions",
    validate=request.validate,
    model_and_stream=lambda body: (body["model"], bool(body.get("stream"))),
    decode_request=request.decode,
    encode_response=lambda resp, ex: Answer(response.encode(resp, ex.model)),
    stream_encoder=lambda ex: ChatStreamEncoder(ex.model, _client_wants_usage(ex.body)),
    error_body=error_body,
    affinity_key=request.conversation_key,
)

UPSTREAM = UpstreamSide(
    path="/chat/completions",
    auth_headers=lambda key: {"Authorization": f"Bearer {key}"},
    encode_request=upstream_request.encode,
    decode_response=lambda doc, upstream: response.decode(doc),
    stream_decoder=lambda req, up: ChatStreamDecoder(expect_usage=up.stream_usage),
    error_in_body=_error_in_body,
    # OpenRouter-style servers take Anthropic's caching hint on content parts and tools; strict ones
    # reject it there.
    nested_fields={"cache_control": (("messages", "*", "content", "*"), ("tools", "*"))},
)


def _passthrough_stream(ex: Exchange, upstream: Upstream) -> ChatPassthroughStream:
    return ChatPassthroughStream(ex.model, _client_wants_usage(ex.body))


PASSTHROUGH = Passthrough(
    prepare_request=_prepare,
    normalise_response=lambda body, ex: Answer(response.normalise(body, ex.model)),
    stream_relay=_passthrough_stream,
    relayed_error=relayed_error_body,
)

PROTOCOL = Protocol(name="chat_completions", title="OpenAI-compatible (Chat Completions)",
                    client=CLIENT, upstream=UPSTREAM, passthrough=PASSTHROUGH, aliases=("openai",),
                    provider="openai", embeddings=embeddings.CODEC)

__all__ = ["PROTOCOL"]
