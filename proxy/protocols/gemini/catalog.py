"""Gemini's model list, both ways: `GET /v1beta/models` (paged) and `GET /v1beta/models/{model}` for
Gemini clients, from the proxy's catalog; and the model ids read from a Gemini upstream's list.

The proxy knows a model's name and owner, not its limits: entries give the limits of the current
Gemini models (1,048,576 input / 65,536 output tokens) so clients that read them (gemini-cli's
context meter) have numbers, and every model offers generateContent, streamGenerateContent and
countTokens — what the proxy serves for any model.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.errors import ProxyError, invalid

INPUT_TOKEN_LIMIT = 1_048_576
OUTPUT_TOKEN_LIMIT = 65_536
DEFAULT_PAGE_SIZE = 50  # the API's default
MAX_PAGE_SIZE = 1000
METHODS = ["generateContent", "streamGenerateContent", "countTokens"]


def entry(model_id: str) -> dict[str, Any]:
    return {"name": f"models/{model_id}", "baseModelId": model_id, "version": "001", "displayName": model_id,
            "description": f"{model_id}, served by llm-proxy", "inputTokenLimit": INPUT_TOKEN_LIMIT,
            "outputTokenLimit": OUTPUT_TOKEN_LIMIT, "supportedGenerationMethods": METHODS, "thinking": True,
            "temperature": 1, "maxTemperature": 2, "topP": 0.95, "topK": 64}


def listing(models: list[Any], model: str | None, query: Mapping[str, str]) -> dict[str, Any]:
    """The answer to GET /v1beta/models (one page) or, with `model`, GET /v1beta/models/{model}.
    `models` are the catalog's (with `.id`), already only those the client's key may use. The page
    token is the index of the page's first model."""
    ids = [m.id for m in models]
    if model is not None:
        name = model.removeprefix("models/")
        if name not in ids:
            raise ProxyError(404, f"models/{name} is not found on this proxy; GET /v1beta/models lists the models.",
                             "not_found")
        return entry(name)
    size = _number(query.get("pageSize"), "pageSize", DEFAULT_PAGE_SIZE)
    start = _number(query.get("pageToken"), "pageToken", 0)
    size = min(size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)  # proto3: a pageSize of 0 is one not given
    page = ids[start:start + size]
    out: dict[str, Any] = {"models": [entry(i) for i in page]}
    if start + size < len(ids):
        out["nextPageToken"] = str(start + size)
    return out


def _number(value: str | None, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    if not value.isdigit():
        raise invalid(name, f"must be a whole number (got {value!r}).")
    return int(value)


def upstream_model_ids(doc: Any) -> list[str] | None:
    """The model ids of a Gemini upstream's `{"models": [{"name": "models/…"}]}` (None: not that)."""
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, list):
        return None
    return [m["name"].removeprefix("models/") for m in models if isinstance(m, dict) and isinstance(m.get("name"), str)]
