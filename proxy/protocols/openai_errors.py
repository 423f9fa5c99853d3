"""The OpenAI error envelope, shared by the two OpenAI APIs (Chat Completions and Responses).

Owns `{"error": {"message", "type", "param", "code"}}`: the type and default code for each of the
proxy's error kinds, the HTTP error body, and an OpenAI-protocol upstream's own error body
completed to this envelope for a client of the same protocol. Both OpenAI SDKs parse errors of
either API through this one shape, so it lives here rather than in either protocol's package (a
protocol package never imports another). How a failed stream carries it is each protocol's own.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.response import ErrorInfo

# kind → (type, default code). Clients key off the HTTP status first; Codex CLI also reads codes
# such as server_is_overloaded and rate_limit_exceeded to decide whether and when to retry.
_TYPES: dict[str, tuple[str, str | None]] = {
    "invalid_request": ("invalid_request_error", None),
    "authentication": ("invalid_request_error", "invalid_api_key"),
    "billing": ("insufficient_quota", "insufficient_quota"),
    "permission": ("permission_error", None),
    "not_found": ("invalid_request_error", "not_found"),
    "method_not_allowed": ("invalid_request_error", "method_not_allowed"),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "unsupported_media_type": ("invalid_request_error", "unsupported_media_type"),
    "rate_limit": ("rate_limit_exceeded", "rate_limit_exceeded"),
    "budget": ("insufficient_quota", "insufficient_quota"),  # what OpenAI answers an account out of credit
    "api_error": ("server_error", None),
    "upstream_error": ("server_error", "upstream_error"),
    "unavailable": ("server_error", "service_unavailable"),
    "timeout": ("server_error", "timeout"),
    "overloaded": ("server_error", "server_is_overloaded"),
}


def error_body(info: ErrorInfo) -> dict[str, Any]:
    etype, code = _TYPES.get(info.kind, ("server_error", None))
    return {"error": {"message": info.message, "type": etype, "param": info.param, "code": info.code or code}}


def relayed_error_body(doc: dict[str, Any], info: ErrorInfo) -> dict[str, Any] | None:
    """An OpenAI-protocol upstream's error body for a client of the same protocol: its own wording
    and fields (codes such as context_length_exceeded matter to clients), completed where a
    compatible server left out part of the envelope; None if the body is not in this envelope."""
    upstream_error = doc.get("error")
    if not isinstance(upstream_error, dict) or not isinstance(upstream_error.get("message"), str):
        return None
    envelope = error_body(info)["error"]
    kept = {k: v for k, v in upstream_error.items() if v is not None or k not in envelope}
    return {**doc, "error": {**envelope, **kept}}
