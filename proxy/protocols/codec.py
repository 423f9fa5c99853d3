"""What a protocol package provides: everything the proxy knows about one wire protocol.

Owns the shape of the plug-in points. A protocol is one `Protocol`: its name (the same for its
endpoint, its package, the config's `protocol:` value, fixtures and goldens), how to speak to a
client of it (`ClientSide`), how to speak to an upstream of it (`UpstreamSide`), and what to do
when client and upstream both speak it (`Passthrough`). Adding a protocol means filling these in
and registering it (`proxy.protocols.registry`); the relay, the HTTP edge, the upstream client,
the config and the CLI never name a protocol.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.config import Upstream
from proxy.ir.embeddings import EmbeddingsAnswer, EmbeddingsRequest
from proxy.ir.request import Request
from proxy.ir.response import ErrorInfo, Response
from proxy.protocols.exchange import Exchange
from proxy.protocols.transcode import StreamDecoder, StreamEncoder, StreamRelay


@dataclass(frozen=True)
class Answer:
    """A whole answer for the client, with what encoding it found out: `final`, the response object
    a conversation keeps for the next turn (None: nothing to keep), and `dropped`, what was left out
    for this client, by what ("reasoning": 2), for the log line."""

    body: dict[str, Any]
    final: dict[str, Any] | None = None
    dropped: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Endpoint:
    """An endpoint a protocol's clients use beside its main one, which the HTTP edge serves for it
    by kind, so that no blueprint names a protocol:
    - `local`: answered by the proxy alone — `answer(body)` gives the model the request names (the
      client's key must allow it) and the JSON answer (Messages' count_tokens);
    - `socket`: the main endpoint's requests over a WebSocket at `rule` (GET), framed by `frames`,
      the protocol's WebSocket module (Responses' `GET /v1/responses`);
    - `relayed`: a request of the protocol relayed like the main one, to `upstream_path` on an
      upstream of the same protocol; `compacts`: it asks for the conversation compacted
      (Responses' `/v1/responses/compact`);
    - `catalog`: the model list in the protocol's own shape (Gemini's `GET /v1beta/models`).
    A `local` endpoint whose rule has a `<path:model>` part (Gemini's `:countTokens`) gets the body
    through the client side's `body_from_url`, as the main endpoint's URL routes do."""

    kind: str  # local | socket | relayed | catalog
    rule: str
    answer: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]] | None = None
    # A `local` endpoint that counts a prompt's tokens: the request to count, from the body, and the
    # answer for a count. The count is the upstream's where its protocol can say, else the proxy's estimate.
    counted: Callable[[dict[str, Any]], Request] | None = None
    count_answer: Callable[[int], dict[str, Any]] | None = None
    # `catalog`: GET `rule` answers the model list in the protocol's shape, given the models the
    # client's key may use, the one model the URL names (a `<path:model>` part) or None, and the query.
    catalog: Callable[[list[Any], str | None, Mapping[str, str]], dict[str, Any]] | None = None
    frames: Any = None
    upstream_path: str | None = None
    compacts: bool = False


@dataclass(frozen=True)
class UrlRoute:
    """A URL a protocol's clients post requests to that names the model and the call, not the body
    (Gemini's `/v1beta/models/{model}:streamGenerateContent`): a Flask rule with a `<path:model>`
    part, and whether a request there streams."""

    rule: str
    stream: bool


@dataclass(frozen=True)
class ClientSide:
    """Speaking to a client of this protocol."""

    path: str  # the endpoint a client posts a request to ("/v1/messages"); longer paths under it are its own
    validate: Callable[[dict[str, Any]], None]  # a 400 (ProxyError) naming the field, for a body it cannot take
    model_and_stream: Callable[[dict[str, Any]], tuple[str, bool]]  # of a validated body
    decode_request: Callable[[dict[str, Any]], Request]
    encode_response: Callable[[Response, Exchange], Answer]
    stream_encoder: Callable[[Exchange], StreamEncoder]
    error_body: Callable[[ErrorInfo], dict[str, Any]]  # the error envelope its SDKs parse
    # The HTTP status its API answers an error kind with, where it is not the kind's default
    # (proxy.errors.KIND_STATUS): Anthropic says "out of credit" (kind `budget`) with a 400.
    kind_status: Mapping[str, int] = field(default_factory=dict)
    # Client headers that go on to an upstream of this same protocol (Anthropic's version and betas).
    forwarded_headers: tuple[str, ...] = ()
    # Request headers a browser client of this protocol sends, to allow in CORS preflight.
    cors_headers: tuple[str, ...] = ()
    # Response headers its clients read, given the request id ({"request-id": rid} for Anthropic's).
    response_headers: Callable[[str], dict[str, str]] = lambda request_id: {}
    # The API keeps conversation state on the proxy between requests (Responses: previous_response_id,
    # item_reference): the edge asks proxy.conversations for each request's `ConversationState`.
    keeps_conversations: bool = False
    # The conversation a request belongs to, as its clients name it (a session header, a cache key,
    # a user field), given the body and the request's headers (names lower-cased): its next turn goes
    # to the account that served this one (proxy/relay/affinity.py). None: it names none.
    affinity_key: Callable[[dict[str, Any], Mapping[str, str]], str | None] = lambda body, headers: None
    # Where the URL, not the body, names the model (Gemini): the routes of the main endpoint (then
    # `path` is only the prefix its errors are recognised by), and the body the proxy works with,
    # given the posted body, the model and whether it streams (from the route) and the query string.
    url_routes: tuple[UrlRoute, ...] = ()
    body_from_url: Callable[[dict[str, Any], str, bool, Mapping[str, str]], dict[str, Any]] | None = None
    # Where else its clients present their key: a header (Gemini's `x-goog-api-key`) and a query
    # parameter (`?key=`, never logged), besides `x-api-key` and `Authorization: Bearer`.
    key_header: str | None = None
    key_query: str | None = None


@dataclass(frozen=True)
class UpstreamSide:
    """Speaking to an upstream of this protocol, translating from the IR."""

    path: str  # under the upstream's base_url
    auth_headers: Callable[[str], dict[str, str]]  # given the account's key
    encode_request: Callable[[Request, str, Upstream], dict[str, Any]]
    decode_response: Callable[[dict[str, Any], Upstream], Response]
    stream_decoder: Callable[[Request, Upstream], StreamDecoder]
    # An error some servers put in a 200 body instead of an answer (given the body and the secrets to
    # scrub from it), judged like the HTTP error it stands for; None when the body is an answer.
    error_in_body: Callable[[dict[str, Any], tuple[str, ...]], ErrorInfo | None]
    # Headers an upstream of this protocol requires on every request; a client's own values win.
    required_headers: Mapping[str, str] = field(default_factory=dict)
    # Where, below the top level of its requests, a field an upstream may be configured not to take
    # also sits (`unsupported:`), as paths ("*": each element of a list).
    nested_fields: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    # Where the URL names the model and the call (Gemini): the path for a model, streamed or not,
    # instead of `path`.
    path_for: Callable[[str, bool], str] | None = None
    # The model list: its path under the base URL, and the model ids read from its JSON answer (None:
    # not a list) — the OpenAI shape `{"data": [{"id"}]}` unless the protocol says otherwise.
    models_path: str = "/models"
    model_ids: Callable[[Any], list[str] | None] | None = None
    # Counting a prompt's tokens on the upstream (Gemini's :countTokens): the path and body for a
    # request and the model asked of it, and the count read from the answer (None: unreadable).
    # Without them the proxy estimates locally.
    count_tokens: Callable[[Request, str, Upstream], tuple[str, dict[str, Any]]] | None = None
    read_count: Callable[[Any], int | None] | None = None


@dataclass(frozen=True)
class Passthrough:
    """Client and upstream speak this protocol: relay the body, normalising only what breaks clients."""

    prepare_request: Callable[[Exchange, dict[str, Any], str, Upstream], dict[str, Any]]  # (ex, body, model, up)
    normalise_response: Callable[[dict[str, Any], Exchange], Answer]
    stream_relay: Callable[[Exchange, Upstream], StreamRelay]
    # The upstream's own error body for the client, in this protocol's envelope; None to re-express it.
    relayed_error: Callable[[dict[str, Any], ErrorInfo], dict[str, Any] | None]


@dataclass(frozen=True)
class EmbeddingsCodec:
    """A protocol's embeddings: the endpoints its clients post to, the call its upstreams serve,
    and the same protocol on both sides. Bodies of both sides meet in proxy.ir.embeddings; vectors
    travel as the upstream's number texts, never parsed and re-printed."""

    # Client side. `rules`: the Flask rules its clients post to (a `<path:model>` part where the URL
    # names the model); `body_from_url`: the body the proxy works with, given the posted body, the
    # model the URL names (None: no such part) and the rule it came by.
    rules: tuple[str, ...]
    body_from_url: Callable[[dict[str, Any], str | None, str], dict[str, Any]]
    validate: Callable[[dict[str, Any]], None]  # a 400 (ProxyError) naming the field
    model_of: Callable[[dict[str, Any]], str]  # of a validated body
    decode: Callable[[dict[str, Any]], EmbeddingsRequest]
    # The client's answer (JSON bytes), given the IR answer, the client's body and the model it asked for.
    encode_answer: Callable[[EmbeddingsAnswer, dict[str, Any], str], bytes]
    # Upstream side: where a request for a model goes, its body (a ProxyError 400 for what this
    # upstream cannot be asked, such as token arrays), and its answer read (ValueError: unreadable).
    path_for: Callable[[EmbeddingsRequest, str], str]
    encode_request: Callable[[EmbeddingsRequest, str], dict[str, Any]]
    decode_answer: Callable[[bytes], EmbeddingsAnswer]
    # Passthrough: the client's body with only the model mapped, the path it goes to, and the input
    # tokens the upstream's own answer reports (its bytes go to the client as they came).
    prepare: Callable[[dict[str, Any], str], dict[str, Any]]
    passthrough_path: Callable[[dict[str, Any], str], str]
    prompt_tokens: Callable[[bytes], int | None]


@dataclass(frozen=True)
class Protocol:
    name: str  # chat_completions | messages | responses | …: endpoint, package, config value
    title: str  # for people: "OpenAI Chat Completions"
    client: ClientSide
    upstream: UpstreamSide
    passthrough: Passthrough
    aliases: tuple[str, ...] = ()  # older `protocol:` values that still mean this one (deprecated)
    # Who serves this API, as OpenTelemetry's GenAI conventions name it (`gen_ai.provider.name`:
    # openai, anthropic, gcp.gemini); "" for a protocol no convention names.
    provider: str = ""
    # Endpoints beside the client's main one, which the edge serves for this protocol.
    endpoints: tuple[Endpoint, ...] = ()
    # Embeddings, when the protocol has them (its clients' endpoints, its upstreams' calls); None:
    # routing skips its upstreams for an embeddings request.
    embeddings: EmbeddingsCodec | None = None
