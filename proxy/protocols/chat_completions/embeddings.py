"""OpenAI's embeddings API, `POST /v1/embeddings`, for OpenAI clients and OpenAI-compatible
upstreams (`POST {base_url}/embeddings`): the request checked (a 400 naming the field), decoded to
and encoded from proxy.ir.embeddings, and the answer — `{"object": "list", "data": [{"object":
"embedding", "index", "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}` — written
from the upstream's number texts (a float list, or base64 float32 when the client asked for it).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.errors import invalid
from proxy.ir.embeddings import (
    EmbeddingsAnswer,
    EmbeddingsRequest,
    Input,
    as_int,
    count_in,
    loads_raw,
    vector_base64,
    vector_json,
    vector_of,
)
from proxy.protocols.codec import EmbeddingsCodec

PATH = "/v1/embeddings"
FORMATS = ("float", "base64")



def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _inputs(value: Any) -> tuple[Input, ...]:
    """`input`: a string, an array of strings, one token array, or an array of token arrays."""
    if isinstance(value, str):
        if not value:
            raise invalid("input", "must not be an empty string.")
        return (value,)
    if not isinstance(value, list) or not value:
        raise invalid("input", "must be a string, an array of strings, an array of integers (tokens) or an "
                               "array of arrays of integers, and not empty.")
    if all(_is_int(v) for v in value):
        return (tuple(value),)
    out: list[Input] = []
    for i, item in enumerate(value):
        if isinstance(item, str) and item:
            out.append(item)
        elif isinstance(item, list) and item and all(_is_int(v) for v in item):
            out.append(tuple(item))
        else:
            raise invalid(f"input[{i}]", "must be a non-empty string or a non-empty array of integers (tokens).")
    return tuple(out)


def validate(body: dict[str, Any]) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model", "is required: the name of the embeddings model, a non-empty string.")
    if "input" not in body:
        raise invalid("input", "is required: the text (or texts, or token arrays) to embed.")
    _inputs(body["input"])
    fmt = body.get("encoding_format")
    if fmt is not None and fmt not in FORMATS:
        raise invalid("encoding_format", f"must be 'float' or 'base64', not {fmt!r}.")
    dims = body.get("dimensions")
    if dims is not None and (not _is_int(dims) or dims < 1):
        raise invalid("dimensions", "must be a positive integer.")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid("user", "must be a string.")


def decode(body: dict[str, Any]) -> EmbeddingsRequest:
    return EmbeddingsRequest(_inputs(body["input"]), body.get("dimensions"), body.get("encoding_format") or "float",
                             body.get("user"))


def encode_answer(answer: EmbeddingsAnswer, body: dict[str, Any], model: str) -> bytes:
    """OpenAI's answer, written by hand around the vectors so their numbers stay as they came."""
    base64 = body.get("encoding_format") == "base64"
    items = []
    for i, vector in enumerate(answer.vectors):
        embedding = json.dumps(vector_base64(vector)) if base64 else vector_json(vector)
        items.append(f'{{"object":"embedding","index":{i},"embedding":{embedding}}}')
    tokens = answer.prompt_tokens or 0
    return (f'{{"object":"list","data":[{",".join(items)}],"model":{json.dumps(model)},'
            f'"usage":{{"prompt_tokens":{tokens},"total_tokens":{tokens}}}}}').encode()


def encode_request(req: EmbeddingsRequest, model: str) -> dict[str, Any]:
    """For an OpenAI-compatible upstream: floats asked for (the client's format is made here)."""
    inputs: list[Any] = [i if isinstance(i, str) else list(i) for i in req.inputs]
    body: dict[str, Any] = {"model": model, "input": inputs, "encoding_format": "float"}
    if req.dimensions is not None:
        body["dimensions"] = req.dimensions
    if req.user is not None:
        body["user"] = req.user
    return body


def decode_answer(raw: bytes) -> EmbeddingsAnswer:
    doc = loads_raw(raw)
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise ValueError("the answer has no 'data' list")
    ordered = sorted(data, key=lambda item: as_int(item.get("index")) or 0 if isinstance(item, dict) else 0)
    vectors = []
    for item in ordered:
        if not isinstance(item, dict):
            raise ValueError("an item of 'data' is not an object")
        vectors.append(vector_of(item.get("embedding")))
    return EmbeddingsAnswer(tuple(vectors), _tokens_of(doc))


def _tokens_of(doc: Any) -> int | None:
    usage = doc.get("usage") if isinstance(doc, dict) else None
    return as_int(usage.get("prompt_tokens")) if isinstance(usage, dict) else None


CODEC = EmbeddingsCodec(
    rules=(PATH,),
    body_from_url=lambda body, model, rule: body,
    validate=validate,
    model_of=lambda body: body["model"],
    decode=decode,
    encode_answer=encode_answer,
    path_for=lambda req, model: "/embeddings",
    encode_request=encode_request,
    decode_answer=decode_answer,
    prepare=lambda body, model: {**body, "model": model},
    passthrough_path=lambda body, model: "/embeddings",
    prompt_tokens=lambda raw: count_in(raw, _tokens_of),
)
