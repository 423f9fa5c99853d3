"""The Gemini API's embeddings: `POST /v1beta/models/{model}:embedContent` (one `content`, answered
`{"embedding": {"values": […]}}`) and `:batchEmbedContents` (`{"requests": [{"model", "content",
"outputDimensionality"}, …]}`, answered `{"embeddings": [{"values": […]}, …]}`), for Gemini clients
(under every root the protocol's calls are served at) and `protocol: gemini` upstreams (one input
goes to `:embedContent`, several to `:batchEmbedContents`). Only text parts embed: a token array
cannot be sent to a Gemini upstream (a 400 naming `input`). Gemini's answers carry no token count
unless `usageMetadata` says one: the relay then estimates it (proxy.ir.embeddings).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import invalid
from proxy.ir.embeddings import EmbeddingsAnswer, EmbeddingsRequest, as_int, count_in, loads_raw, vector_json, vector_of
from proxy.protocols.codec import EmbeddingsCodec
from proxy.protocols.gemini.spelling import camel_keys
from proxy.protocols.gemini.vocabulary import API_VERSION, URL_KEY

MODELS = f"/{API_VERSION}/models"
SINGLE, BATCH = "embedContent", "batchEmbedContents"
ROOTS = (MODELS, "/v1/models")  # as the protocol's generateContent calls (proxy/protocols/gemini/__init__.py)



def _call(body: dict[str, Any]) -> str:
    url = body.get(URL_KEY)
    return url.get("call", SINGLE) if isinstance(url, dict) else SINGLE


def body_from_url(body: dict[str, Any], model: str | None, rule: str) -> dict[str, Any]:
    call = BATCH if rule.endswith(":" + BATCH) else SINGLE
    return {**camel_keys(body), "model": (model or "").removeprefix("models/"), URL_KEY: {"call": call}}


def _requests(body: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Each EmbedContentRequest of the body, with the field path it is at."""
    if _call(body) == SINGLE:
        return [(body, "")]
    requests = body.get("requests")
    if not isinstance(requests, list) or not requests:
        raise invalid("requests", "must be a non-empty array of EmbedContentRequest objects.")
    out = []
    for i, item in enumerate(requests):
        if not isinstance(item, dict):
            raise invalid(f"requests[{i}]", "must be an object.")
        out.append((item, f"requests[{i}]."))
    return out


def _text(item: dict[str, Any], at: str) -> str:
    content = item.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not parts:
        raise invalid(f"{at}content", "must be an object with a non-empty 'parts' array.")
    texts = []
    for i, part in enumerate(parts):
        text = part.get("text") if isinstance(part, dict) else None
        if not isinstance(text, str):
            raise invalid(f"{at}content.parts[{i}]", "must have a 'text' string: only text embeds.")
        texts.append(text)
    return " ".join(texts)


def validate(body: dict[str, Any]) -> None:
    if not body.get("model"):
        raise invalid("model", "The URL must name the model: /v1beta/models/{model}:embedContent.")
    for item, at in _requests(body):
        _text(item, at)
        dims = item.get("outputDimensionality")
        if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool) or dims < 1):
            raise invalid(f"{at}outputDimensionality", "must be a positive integer.")


def decode(body: dict[str, Any]) -> EmbeddingsRequest:
    items = _requests(body)
    dims = next((d for item, _ in items if (d := item.get("outputDimensionality")) is not None), None)
    return EmbeddingsRequest(tuple(_text(item, at) for item, at in items), dims)


def encode_answer(answer: EmbeddingsAnswer, body: dict[str, Any], model: str) -> bytes:
    if _call(body) == SINGLE and len(answer.vectors) == 1:
        return f'{{"embedding":{{"values":{vector_json(answer.vectors[0])}}}}}'.encode()
    items = ",".join(f'{{"values":{vector_json(v)}}}' for v in answer.vectors)
    return f'{{"embeddings":[{items}]}}'.encode()


def path_for(req: EmbeddingsRequest, model: str) -> str:
    return f"{MODELS}/{model}:{SINGLE if len(req.inputs) == 1 else BATCH}"


def _one(text: str, model: str, dims: int | None) -> dict[str, Any]:
    item: dict[str, Any] = {"model": f"models/{model}", "content": {"parts": [{"text": text}]}}
    if dims is not None:
        item["outputDimensionality"] = dims
    return item


def encode_request(req: EmbeddingsRequest, model: str) -> dict[str, Any]:
    texts = []
    for i, value in enumerate(req.inputs):
        if not isinstance(value, str):
            raise invalid("input", f"input[{i}] is a token array, and model {model!r} is served by a Gemini "
                                   "upstream, which embeds only text: send the text instead.")
        texts.append(value)
    if len(texts) == 1:
        return _one(texts[0], model, req.dimensions)
    return {"requests": [_one(t, model, req.dimensions) for t in texts]}


def _tokens_of(doc: Any) -> int | None:
    meta = doc.get("usageMetadata") if isinstance(doc, dict) else None
    return as_int(meta.get("promptTokenCount")) if isinstance(meta, dict) else None


def decode_answer(raw: bytes) -> EmbeddingsAnswer:
    doc = loads_raw(raw)
    if not isinstance(doc, dict):
        raise ValueError("the answer is not an object")
    if isinstance(doc.get("embedding"), dict):
        return EmbeddingsAnswer((vector_of(doc["embedding"].get("values")),), _tokens_of(doc))
    items = doc.get("embeddings")
    if not isinstance(items, list):
        raise ValueError("the answer has neither 'embedding' nor 'embeddings'")
    return EmbeddingsAnswer(tuple(vector_of(e.get("values") if isinstance(e, dict) else None) for e in items),
                            _tokens_of(doc))


def prepare(body: dict[str, Any], model: str) -> dict[str, Any]:
    """The client's body to a Gemini upstream: only the model names mapped."""
    out = {k: v for k, v in body.items() if k not in ("model", URL_KEY)}
    if _call(body) == SINGLE:
        return {**out, "model": f"models/{model}"}
    out["requests"] = [{**item, "model": f"models/{model}"} if isinstance(item, dict) else item
                       for item in out.get("requests") or []]
    return out


CODEC = EmbeddingsCodec(
    rules=tuple(f"{root}/<path:model>:{call}" for root in ROOTS for call in (SINGLE, BATCH)),
    body_from_url=body_from_url,
    validate=validate,
    model_of=lambda body: body["model"],
    decode=decode,
    encode_answer=encode_answer,
    path_for=path_for,
    encode_request=encode_request,
    decode_answer=decode_answer,
    prepare=prepare,
    passthrough_path=lambda body, model: f"{MODELS}/{model}:{_call(body)}",
    prompt_tokens=lambda raw: count_in(raw, _tokens_of),
)
