"""The Anthropic Messages protocol, `messages`: the `/v1/messages` endpoint (`count_tokens` beside
it) and `protocol: messages` upstreams (Anthropic and Anthropic-compatible servers; `anthropic` is
the older name of the config value). Everything the proxy knows about this wire format is in this
package; this module puts it together as the protocol's `PROTOCOL`."""

from __future__ import annotations

from typing import Any

from proxy.config import Upstream
from proxy.errors import embedded_error
from proxy.ir.drop_reasoning import without_reasoning
from proxy.ir.request import Request
from proxy.ir.response import ErrorInfo, Response
from proxy.ir.tokens import estimate_input_tokens
from proxy.protocols.codec import Answer, ClientSide, Endpoint, Passthrough, Protocol, UpstreamSide
from proxy.protocols.exchange import Exchange
from proxy.protocols.messages import prompt_cache, request, response, upstream_request, upstream_response
from proxy.protocols.messages.errors import error_body, relayed_error_body
from proxy.protocols.messages.passthrough import (
    MessagesPassthroughStream,
    without_foreign_thinking,
    without_thinking,
)
from proxy.protocols.messages.stream_decode import MessagesStreamDecoder
from proxy.protocols.messages.stream_encode import MessagesStreamEncoder
from proxy.protocols.messages.tool_pairs import repair_tool_pairs
from proxy.protocols.messages.trailing_signatures import without_trailing


def thinking_enabled(body: dict[str, Any]) -> bool:
    """Whether the client asked for thinking (`enabled` or `adaptive`): the real API sends thinking
    blocks only then, and clients that did not ask may read `content[0]` as the answer's text."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _stream_encoder(ex: Exchange) -> MessagesStreamEncoder:
    return MessagesStreamEncoder(ex.model, estimate_input_tokens(ex.ir) if ex.ir is not None else 0,
                                 thinking=thinking_enabled(ex.body))


def _encode_response(resp: Response, ex: Exchange) -> Answer:
    dropped: dict[str, int] = {}
    if not thinking_enabled(ex.body):
        resp.output, count = without_reasoning(resp.output)
        if count:
            dropped["reasoning"] = count
    resp.output = without_trailing(resp.output, dropped)  # no thinking block after the last word
    return Answer(response.encode(resp, ex.model), dropped=dropped)


def _prepare(ex: Exchange, body: dict[str, Any], model: str, upstream: Upstream) -> dict[str, Any]:
    # Everything the client sent goes up as it was (cache_control, thinking, betas in the headers);
    # only the model is mapped, thinking blocks the proxy signed itself are left out, tool calls and
    # results that lost their other half are repaired (Anthropic rejects them), and a request that
    # asks for no prompt caching gets the upstream's `prompt_cache` (prompt_cache.py).
    messages = repair_tool_pairs(without_foreign_thinking(body["messages"]))
    return prompt_cache.for_upstream({**body, "model": model, "messages": messages}, upstream)


def _encode_request(ir: Request, model: str, upstream: Upstream) -> dict[str, Any]:
    return prompt_cache.for_upstream(upstream_request.encode(ir, model, upstream), upstream)


# The API version the proxy speaks to Anthropic upstreams; a Messages client's own goes instead.
ANTHROPIC_VERSION = "2023-06-01"


def _error_in_body(doc: dict[str, Any], secrets: tuple[str, ...]) -> ErrorInfo | None:
    """A 200 whose body is an error (`{"type": "error", …}`) instead of a Message."""
    return embedded_error(doc, secrets) if "content" not in doc else None


CLIENT = ClientSide(
    path="/v1/messages",
    validate=request.validate,
    model_and_stream=lambda body: (body["model"], bool(body.get("stream"))),
    decode_request=request.decode,
    encode_response=_encode_response,
    stream_encoder=_stream_encoder,
    error_body=error_body,
    kind_status={"budget": 400},  # Anthropic answers a spent credit balance with invalid_request_error
    # Kept for an Anthropic upstream: any version a client sends (SDKs differ), and its betas.
    forwarded_headers=("anthropic-version", "anthropic-beta"),
    cors_headers=("anthropic-version", "anthropic-beta", "anthropic-dangerous-direct-browser-access"),
    response_headers=lambda request_id: {"request-id": request_id},  # what Anthropic's SDKs read
    affinity_key=request.conversation_key,
)

UPSTREAM = UpstreamSide(
    path="/messages",
    auth_headers=lambda key: {"x-api-key": key},
    encode_request=_encode_request,
    decode_response=lambda doc, upstream: upstream_response.decode(doc),
    stream_decoder=lambda req, up: MessagesStreamDecoder(),
    error_in_body=_error_in_body,
    required_headers={"anthropic-version": ANTHROPIC_VERSION},
    # Anthropic's prompt-caching hint sits on system blocks, content blocks (those in tool results
    # too) and tools; Anthropic-compatible servers that reject it reject it there.
    nested_fields={prompt_cache.FIELD: prompt_cache.NESTED},
)


def _normalise(body: dict[str, Any], ex: Exchange) -> Answer:
    if thinking_enabled(ex.body):
        return Answer(body)
    dropped: dict[str, int] = {}
    return Answer(without_thinking(body, dropped), dropped=dropped)


PASSTHROUGH = Passthrough(
    prepare_request=_prepare,
    normalise_response=_normalise,
    stream_relay=lambda ex, up: MessagesPassthroughStream(thinking_enabled(ex.body)),
    relayed_error=relayed_error_body,
)

# `POST /v1/messages/count_tokens` (Claude Code adds `?beta=true`): the prompt's tokens, counted by the
# upstream where its protocol can (Gemini), else estimated locally; the model it names must be one
# the client's key may use, which the edge checks.
PROTOCOL = Protocol(name="messages", title="Anthropic Messages", client=CLIENT, upstream=UPSTREAM,
                    passthrough=PASSTHROUGH, aliases=("anthropic",),
                    endpoints=(Endpoint("local", CLIENT.path + "/count_tokens",
                                        counted=lambda body: request.decode(body, count_tokens=True),
                                        count_answer=lambda n: {"input_tokens": n}),), provider="anthropic")

__all__ = ["PROTOCOL", "thinking_enabled"]
