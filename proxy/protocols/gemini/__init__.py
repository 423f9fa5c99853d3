"""The Gemini API protocol, `gemini`: the `v1beta` surface Gemini clients use —
`POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent` (SSE with `?alt=sse`, one
streamed JSON array without), `:countTokens`, `GET /v1beta/models[/{model}]` — and `protocol:
gemini` upstreams (`base_url` the API root, e.g. https://generativelanguage.googleapis.com; the
proxy adds `/v1beta`). The URL, not the body, names the model and the call: the edge folds them
into the body the proxy works with (`URL_KEY`, vocabulary.py). Everything the proxy knows about
this wire format is in this package; this module puts it together as the protocol's `PROTOCOL`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.config import Upstream
from proxy.errors import embedded_error
from proxy.ir.request import Request
from proxy.ir.response import ErrorInfo, Response
from proxy.protocols.codec import Answer, ClientSide, Endpoint, Passthrough, Protocol, UpstreamSide, UrlRoute
from proxy.protocols.exchange import Exchange
from proxy.protocols.gemini import (
    catalog,
    embeddings,
    passthrough,
    request,
    response,
    upstream_request,
    upstream_response,
)
from proxy.protocols.gemini.errors import error_body, error_from_gemini
from proxy.protocols.gemini.spelling import camel_keys
from proxy.protocols.gemini.stream_decode import GeminiStreamDecoder
from proxy.protocols.gemini.stream_encode import GeminiStreamEncoder
from proxy.protocols.gemini.vocabulary import API_VERSION, KIND_STATUS, URL_KEY

PREFIX = f"/{API_VERSION}"
MODELS = f"{PREFIX}/models"
# google-genai 3 speaks `v1` unless told otherwise (GOOGLE_AI_API_DEFAULT_VERSION), gemini-cli `v1beta`:
# the calls are served under both; `GET /v1/models` is the proxy's shared list, which carries
# Gemini's `models` too (proxy/blueprints/models.py).
CALL_ROOTS = (MODELS, "/v1/models")


def _body_from_url(body: dict[str, Any], model: str, stream: bool, query: Mapping[str, str]) -> dict[str, Any]:
    url = {"stream": stream, "sse": query.get("alt") == "sse"}
    return {**camel_keys(body), "model": model.removeprefix("models/"), URL_KEY: url}


def _url(body: dict[str, Any]) -> dict[str, Any]:
    url = body.get(URL_KEY)
    return url if isinstance(url, dict) else {}


def _encode_response(resp: Response, ex: Exchange) -> Answer:
    # Thought parts only when asked for (`includeThoughts`), as the API does; their tokens go regardless.
    return Answer(response.encode(resp, ex.model, include_thoughts=request.include_thoughts(ex.body)))


def _error_in_body(doc: dict[str, Any], secrets: tuple[str, ...]) -> ErrorInfo | None:
    """A 200 whose body is `{"error": …}` instead of a GenerateContentResponse."""
    if "candidates" in doc or "promptFeedback" in doc:
        return None
    return error_from_gemini(doc) or (embedded_error(doc, secrets) if "error" in doc else None)


def _count_tokens(req: Request, model: str, upstream: Upstream) -> tuple[str, dict[str, Any]]:
    """`:countTokens` of the whole request (system instruction and tools counted too)."""
    body = upstream_request.encode(req, model, upstream)
    return f"{MODELS}/{model}:countTokens", {"generateContentRequest": {"model": f"models/{model}", **body}}


def _read_count(doc: Any) -> int | None:
    total = doc.get("totalTokens") if isinstance(doc, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else None


def _path_for(model: str, stream: bool) -> str:
    return f"{MODELS}/{model}:streamGenerateContent?alt=sse" if stream else f"{MODELS}/{model}:generateContent"


CLIENT = ClientSide(
    path=PREFIX,
    validate=request.validate,
    model_and_stream=lambda body: (body["model"], bool(_url(body).get("stream"))),
    decode_request=request.decode,
    encode_response=_encode_response,
    stream_encoder=lambda ex: GeminiStreamEncoder(ex.model, sse=bool(_url(ex.body).get("sse")),
                                                  include_thoughts=request.include_thoughts(ex.body)),
    error_body=error_body,
    kind_status=KIND_STATUS,
    cors_headers=("x-goog-api-key", "x-goog-api-client"),
    affinity_key=request.conversation_key,
    url_routes=tuple(UrlRoute(f"{root}/<path:model>:{call}", stream=stream) for root in CALL_ROOTS
                     for call, stream in (("generateContent", False), ("streamGenerateContent", True))),
    body_from_url=_body_from_url,
    key_header="x-goog-api-key",
    key_query="key",
)

UPSTREAM = UpstreamSide(
    path=MODELS,
    auth_headers=lambda key: {"x-goog-api-key": key},
    encode_request=upstream_request.encode,
    decode_response=upstream_response.decode,
    stream_decoder=lambda req, up: GeminiStreamDecoder(up),
    error_in_body=_error_in_body,
    path_for=_path_for,
    models_path=f"{MODELS}?pageSize={catalog.MAX_PAGE_SIZE}",
    model_ids=catalog.upstream_model_ids,
    count_tokens=_count_tokens,
    read_count=_read_count,
)

PASSTHROUGH = Passthrough(
    prepare_request=passthrough.prepare_request,
    normalise_response=lambda body, ex: Answer(body),
    stream_relay=passthrough.stream_relay,
    relayed_error=passthrough.relayed_error,
)

PROTOCOL = Protocol(
    name="gemini", title="Google Gemini API", client=CLIENT, upstream=UPSTREAM, passthrough=PASSTHROUGH,
    endpoints=(*(Endpoint("local", f"{root}/<path:model>:countTokens", counted=request.count_tokens_request,
                          count_answer=lambda n: {"totalTokens": n}) for root in CALL_ROOTS),
               Endpoint("catalog", MODELS, catalog=catalog.listing),
               Endpoint("catalog", f"{MODELS}/<path:model>", catalog=catalog.listing)),
    provider="gcp.gemini", embeddings=embeddings.CODEC)

__all__ = ["PROTOCOL"]
