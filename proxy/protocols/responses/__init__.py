"""The OpenAI Responses protocol, `responses`: the `/v1/responses` endpoints and `protocol: responses`
upstreams. Everything the proxy knows about this wire format is in this package — the
codecs of the conversation state the proxy keeps for clients of stateless upstreams included (the
state itself, and its stores, are proxy.conversations'); this module puts it together as the
protocol's `PROTOCOL`, with the endpoints beside `/v1/responses` (the WebSocket, compact)."""

from __future__ import annotations

from typing import Any

from proxy.config import Upstream
from proxy.errors import ProxyError, embedded_error
from proxy.ir.request import TextPart
from proxy.ir.response import ErrorInfo, Response
from proxy.protocols.codec import Answer, ClientSide, Endpoint, Passthrough, Protocol, UpstreamSide
from proxy.protocols.exchange import Compaction, Exchange
from proxy.protocols.openai_errors import error_body, relayed_error_body
from proxy.protocols.responses import compaction, request, response, upstream_request, upstream_response, websocket
from proxy.protocols.responses.compaction_stream import CompactionStreamEncoder
from proxy.protocols.responses.passthrough import ResponsesPassthroughStream
from proxy.protocols.responses.request import input_items
from proxy.protocols.responses.stream_decode import ResponsesStreamDecoder
from proxy.protocols.responses.stream_encode import ResponsesStreamEncoder
from proxy.protocols.responses.tool_pairs import repair_tool_pairs


def custom_tools(body: dict[str, Any]) -> set[str]:
    """Names of the request's freeform tools, whose calls go back as custom_tool_call items."""
    return {str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "custom"}


def include_encrypted(body: dict[str, Any]) -> bool:
    include = body.get("include")
    return isinstance(include, list) and "reasoning.encrypted_content" in include


def _compacting(ex: Exchange) -> Compaction | None:
    """What the codec needs when this answer is a compaction the proxy performs."""
    return ex.conversation.compaction if ex.conversation is not None else None


def _encode_response(resp: Response, ex: Exchange) -> Answer:
    compacting = _compacting(ex)
    if compacting is not None:
        summary = "".join(p.text for p in resp.output if isinstance(p, TextPart)).strip()
        if not summary:
            raise ProxyError(502, "the upstream answered the compaction request with no summary", "upstream_error")
        item = compaction.compaction_item(compacting.sealer, summary, ex.model)
        if compacting.replaces_conversation:  # v1's answer is not a response: nothing to keep
            return Answer(compaction.compact_body(input_items(ex.body), item, resp.usage))
        out = response.ResponseObject(ex.body, ex.model).snapshot("completed", [item], resp.usage)
    else:
        out = response.encode(resp, ex.body, ex.model, custom_tools(ex.body), include_encrypted(ex.body))
    return Answer(out, final=out)


def _stream_encoder(ex: Exchange) -> ResponsesStreamEncoder | CompactionStreamEncoder:
    compacting = _compacting(ex)
    if compacting is not None:
        return CompactionStreamEncoder(ex.body, ex.model, compacting.sealer)
    return ResponsesStreamEncoder(ex.body, ex.model, custom_tools(ex.body), include_encrypted(ex.body))


def _error_in_body(doc: dict[str, Any], secrets: tuple[str, ...]) -> ErrorInfo | None:
    """A 200 whose body is an error object instead of a response (a failed response has its
    `output` and is decoded as one)."""
    return embedded_error(doc, secrets) if "output" not in doc else None


NAME = "responses"  # the protocol's name in the registry and in upstreams' `protocol:`

CLIENT = ClientSide(
    path="/v1/responses",
    validate=request.validate,
    model_and_stream=lambda body: (body["model"], bool(body.get("stream"))),
    decode_request=lambda body: request.decode(body, input_items(body)),
    encode_response=_encode_response,
    stream_encoder=_stream_encoder,
    error_body=error_body,
    # previous_response_id and item_reference: the proxy keeps what upstreams that are not this one
    # cannot (proxy.conversations).
    keeps_conversations=True,
    affinity_key=request.conversation_key,
)

UPSTREAM = UpstreamSide(
    path="/responses",
    auth_headers=lambda key: {"Authorization": f"Bearer {key}"},
    encode_request=upstream_request.encode,
    decode_response=lambda doc, upstream: upstream_response.decode(doc),
    stream_decoder=lambda req, up: ResponsesStreamDecoder(),
    error_in_body=_error_in_body,
    # Anthropic's prompt-caching hint, as clients copy it onto content parts and tools.
    nested_fields={"cache_control": (("input", "*", "content", "*"), ("tools", "*"))},
)


def _prepare(ex: Exchange, body: dict[str, Any], model: str, upstream: Upstream) -> dict[str, Any]:
    # Everything goes up as the client sent it, only the model mapped — previous_response_id and
    # item_reference included when this upstream holds what they name; otherwise `body` already
    # carries the conversation by value (proxy.conversations.responses).
    # Calls and outputs in `input` that lost their other half are repaired (the upstream rejects them).
    return {**repair_tool_pairs(body), "model": model}


def _normalise_whole(body: dict[str, Any], ex: Exchange) -> Answer:
    """A passed-through answer, kept for the next turn like a translated one (with the upstream's id). When
    the proxy sent the conversation by value, it says the previous_response_id the client sent."""
    previous = ex.body.get("previous_response_id")
    if previous and body.get("previous_response_id") != previous and isinstance(body.get("output"), list):
        body["previous_response_id"] = previous
    finished = body.get("status") in ("completed", "incomplete") and body.get("id")
    return Answer(body, final=body if finished else None)


def _passthrough_stream(ex: Exchange, upstream: Upstream) -> ResponsesPassthroughStream:
    previous = ex.body.get("previous_response_id")
    return ResponsesPassthroughStream(previous if isinstance(previous, str) and previous else None)


PASSTHROUGH = Passthrough(
    prepare_request=_prepare,
    normalise_response=_normalise_whole,
    stream_relay=_passthrough_stream,
    relayed_error=relayed_error_body,
)

ENDPOINTS = (
    # The WebSocket mode of `/v1/responses` (Codex), framed by proxy.protocols.responses.websocket.
    Endpoint("socket", CLIENT.path, frames=websocket),
    # Compaction as OpenAI serves it (v1): at a Responses upstream's own `/responses/compact`, else
    # performed by the proxy (proxy.protocols.responses.compaction).
    Endpoint("relayed", CLIENT.path + "/compact", upstream_path=UPSTREAM.path + "/compact", compacts=True),
)

PROTOCOL = Protocol(name=NAME, title="OpenAI Responses", client=CLIENT, upstream=UPSTREAM,
                    passthrough=PASSTHROUGH, endpoints=ENDPOINTS, provider="openai")

__all__ = ["PROTOCOL", "custom_tools", "include_encrypted"]
