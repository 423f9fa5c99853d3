"""The demo upstream's embeddings: OpenAI's `POST …/embeddings` and Gemini's `:embedContent` /
`:batchEmbedContents` (proxy/demo/upstream.py and proxy/demo/gemini_routes.py route to them).

Owns deterministic vectors — each number from a hash of the input and its position, written with
eight decimals ("0.12300000"), a spelling no JSON encoder would produce from a float, so a test
sees whether the proxy re-encoded them — `dimensions` / `outputDimensionality` honoured (8 by
default), OpenAI's `encoding_format: base64` (float32 little-endian), and OpenAI's
`usage.prompt_tokens` (a quarter of the characters, or a token array's length; at least 1 an
input). Gemini answers carry no token count, as Gemini's own do. A failure is scripted as for
chat: `POST /_demo/keys` or `/_demo/script`, which the upstream applies before any endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from typing import Any

DEFAULT_DIMENSIONS = 8


def numbers(value: str | list[int], dimensions: int) -> list[str]:
    """The vector of one input, as the texts of its numbers."""
    seed = hashlib.sha256(json.dumps(value).encode()).digest()
    return [f"{((seed[d % 32] * 31 + d * 7) % 2001 - 1000) / 1000:.8f}" for d in range(dimensions)]


def _tokens(value: str | list[int]) -> int:
    return max(1, len(value) // 4) if isinstance(value, str) else max(1, len(value))


def _error(message: str, param: str) -> tuple[int, bytes]:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    return 400, json.dumps(body).encode()


def openai(body: Any) -> tuple[int, bytes]:
    """POST /v1/embeddings: the status and the body."""
    if not isinstance(body, dict) or "input" not in body or not isinstance(body.get("model"), str):
        return _error("model and input are required", "input")
    raw = body["input"]
    inputs = [raw] if isinstance(raw, str) or (isinstance(raw, list) and raw and isinstance(raw[0], int)) else raw
    if not isinstance(inputs, list) or not inputs:
        return _error("input must be a string or a non-empty array", "input")
    dims = body.get("dimensions") or DEFAULT_DIMENSIONS
    b64 = body.get("encoding_format") == "base64"
    items = []
    for i, value in enumerate(inputs):
        vector = numbers(value, dims)
        embedding = (json.dumps(base64.b64encode(struct.pack(f"<{dims}f", *map(float, vector))).decode())
                     if b64 else "[" + ",".join(vector) + "]")
        items.append(f'{{"object":"embedding","index":{i},"embedding":{embedding}}}')
    tokens = sum(_tokens(v) for v in inputs)
    text = (f'{{"object":"list","data":[{",".join(items)}],"model":{json.dumps(body["model"])},'
            f'"usage":{{"prompt_tokens":{tokens},"total_tokens":{tokens}}}}}')
    return 200, text.encode()


def _gemini_vector(item: Any) -> str | None:
    content = item.get("content") if isinstance(item, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) and "text" in p for p in parts):
        return None
    text = " ".join(str(p["text"]) for p in parts)
    dims = item.get("outputDimensionality") or DEFAULT_DIMENSIONS
    return '{"values":[' + ",".join(numbers(text, dims)) + "]}"


def gemini(method: str, body: Any) -> tuple[int, dict[str, Any] | bytes]:
    """`:embedContent` or `:batchEmbedContents`: the status and the body (an error as a dict)."""
    def bad(message: str) -> tuple[int, dict[str, Any]]:
        return 400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}

    if method == "embedContent":
        vector = _gemini_vector(body)
        return bad("content must have text parts") if vector is None else (200, f'{{"embedding":{vector}}}'.encode())
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not requests:
        return bad("requests must be a non-empty array")
    vectors = [_gemini_vector(item) for item in requests]
    if any(v is None for v in vectors):
        return bad("every request's content must have text parts")
    return 200, ('{"embeddings":[' + ",".join(v for v in vectors if v) + "]}").encode()
