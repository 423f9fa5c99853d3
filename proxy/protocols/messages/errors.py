"""The Anthropic error envelope (docs/protocols.md §6.1): `{"type": "error", "error": {"type", "message"}}`
(the real API adds a top-level `request_id`).

Owns the error type for each of the proxy's error kinds, for HTTP bodies and for the in-band
`event: error` that ends a stream after its first byte, and an Anthropic upstream's own error body
relayed to a Messages client in this envelope (never OpenAI's). A context-window error the proxy
words itself is worded the way Anthropic words it ("prompt is too long: …"), which is what Claude
Code looks for to compact.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.response import ErrorInfo
from proxy.protocols.sse import named_frame

TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "billing": "billing_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "method_not_allowed": "invalid_request_error",
    "request_too_large": "request_too_large",
    "unsupported_media_type": "invalid_request_error",
    "rate_limit": "rate_limit_error",
    "budget": "invalid_request_error",  # Anthropic's answer to an organisation out of credit (HTTP 400)
    "api_error": "api_error",
    "upstream_error": "api_error",
    "unavailable": "overloaded_error",
    "timeout": "timeout_error",
    "overloaded": "overloaded_error",
}


def _message(info: ErrorInfo) -> str:
    text = info.message
    lowered = text.lower()
    overflow = info.code == "context_length_exceeded" or "context length" in lowered or "context window" in lowered
    if overflow and not text.startswith("prompt is too long"):
        return f"prompt is too long: {text}"
    return text


def error_body(info: ErrorInfo) -> dict[str, Any]:
    return {"type": "error", "error": {"type": TYPES.get(info.kind, "api_error"), "message": _message(info)}}


def relayed_error_body(doc: dict[str, Any], info: ErrorInfo) -> dict[str, Any] | None:
    """An Anthropic-protocol upstream's error body for a Messages client, exactly as it came —
    `request_id` and any other field included, nothing of the OpenAI envelope added — with only
    what this envelope requires filled in where a compatible server left it out; None if the
    body is not in this envelope."""
    upstream_error = doc.get("error")
    if not isinstance(upstream_error, dict) or not isinstance(upstream_error.get("message"), str):
        return None
    error = dict(upstream_error)
    if not isinstance(error.get("type"), str):
        error["type"] = TYPES.get(info.kind, "api_error")
    return {**doc, "type": "error", "error": error}


def stream_error_frame(info: ErrorInfo) -> bytes:
    return named_frame("error", error_body(info))
