"""The Gemini protocol's shared vocabulary: finish reasons, usage and error statuses both ways —
read from what Gemini upstreams send and written for Gemini clients — and the names of the request
fields the proxy adds from the URL (Gemini names the model and the call in the path, not the body).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import hashlib
from typing import Any

from proxy.ir import response as ir
from proxy.ir.response import Usage
from proxy.protocols.fields import count

# The API version the proxy speaks, and under which it serves Gemini clients.
API_VERSION = "v1beta"
# The validator-skip value Gemini documents for a function call whose signature is unknown (a history
# made by another model or upstream): the first call of each step of the current turn gets it.
SKIP_SIGNATURE = "skip_thought_signature_validator"

# What the URL said, kept in the body the proxy works with under this one key (never sent upstream):
# {"stream": bool, "sse": bool} — streamGenerateContent, and with `?alt=sse` (SSE) or without (one
# JSON array, streamed). The model from the URL goes in `model`, a field GenerateContentRequest has.
URL_KEY = "llm_proxy_url"

# Gemini finishReason → the IR's. A turn that calls functions ends with STOP in Gemini; decoders
# make it TOOL_CALLS when the answer has calls. Reasons with no IR equivalent that mean "the model
# failed" (MALFORMED_FUNCTION_CALL, …) are failures, never a normal stop (FAILED_FINISHES).
FINISH_FROM_GEMINI = {
    "STOP": ir.STOP, "MAX_TOKENS": ir.LENGTH,
    "SAFETY": ir.CONTENT_FILTER, "RECITATION": ir.CONTENT_FILTER, "LANGUAGE": ir.CONTENT_FILTER,
    "BLOCKLIST": ir.CONTENT_FILTER, "PROHIBITED_CONTENT": ir.CONTENT_FILTER, "SPII": ir.CONTENT_FILTER,
    "IMAGE_SAFETY": ir.CONTENT_FILTER, "IMAGE_PROHIBITED_CONTENT": ir.CONTENT_FILTER,
    "IMAGE_RECITATION": ir.CONTENT_FILTER,
}
FAILED_FINISHES = {
    "MALFORMED_FUNCTION_CALL": "The model produced a malformed function call (Gemini finishReason "
                               "MALFORMED_FUNCTION_CALL); retry the request.",
    "UNEXPECTED_TOOL_CALL": "The model called a tool that was not offered (Gemini finishReason "
                            "UNEXPECTED_TOOL_CALL).",
    "TOO_MANY_TOOL_CALLS": "The model made too many tool calls in a row (Gemini finishReason TOO_MANY_TOOL_CALLS).",
    "OTHER": "The model stopped for an unspecified reason (Gemini finishReason OTHER).",
    "IMAGE_OTHER": "The model stopped for an unspecified reason (Gemini finishReason IMAGE_OTHER).",
    "NO_IMAGE": "The model produced no image (Gemini finishReason NO_IMAGE).",
}
FINISH_TO_GEMINI = {
    ir.STOP: "STOP", ir.STOP_SEQUENCE: "STOP", ir.TOOL_CALLS: "STOP", ir.PAUSE: "STOP",
    ir.LENGTH: "MAX_TOKENS", ir.CONTEXT_WINDOW: "MAX_TOKENS", ir.CONTENT_FILTER: "SAFETY",
}

# HTTP status → the google.rpc status name Google's APIs answer with.
STATUS_NAMES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 402: "RESOURCE_EXHAUSTED", 403: "PERMISSION_DENIED",
    404: "NOT_FOUND", 405: "INVALID_ARGUMENT", 409: "ABORTED", 413: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL", 501: "NOT_IMPLEMENTED", 502: "UNAVAILABLE",
    503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED", 529: "UNAVAILABLE",
}
# The proxy's error kinds a Gemini client gets with another status than the kind's default
# (proxy.errors.KIND_STATUS): Google has no 413/415/402/529.
KIND_STATUS = {"request_too_large": 400, "unsupported_media_type": 400, "method_not_allowed": 400,
               "billing": 429, "budget": 429, "overloaded": 503}
# google.rpc status name → the proxy's error kind (an upstream's error body, an in-band error).
KIND_FOR_STATUS_NAME = {
    "INVALID_ARGUMENT": "invalid_request", "FAILED_PRECONDITION": "invalid_request", "OUT_OF_RANGE": "invalid_request",
    "UNAUTHENTICATED": "authentication", "PERMISSION_DENIED": "permission", "NOT_FOUND": "not_found",
    "RESOURCE_EXHAUSTED": "rate_limit", "CANCELLED": "api_error", "INTERNAL": "api_error",
    "UNAVAILABLE": "unavailable", "DEADLINE_EXCEEDED": "timeout", "ABORTED": "api_error",
    "NOT_IMPLEMENTED": "invalid_request", "UNKNOWN": "api_error",
}


def minted_call_id(*place: object) -> str:
    """An id for a function call Gemini gave none, derived from where the call stands (the same every
    time that place is read, so a call and its later result agree), in the `call_` + 24 hex form."""
    seed = "/".join(str(p) for p in place)
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:24]


def usage_from_gemini(raw: Any) -> Usage | None:
    """`usageMetadata` → IR usage. Gemini's `promptTokenCount` already counts the cached tokens
    (as the IR's input does), and `candidatesTokenCount` leaves the thoughts out (the IR's output
    counts them): output = candidates + thoughts. Tool-use prompt tokens are prompt tokens."""
    if not isinstance(raw, dict):
        return None
    thoughts = count(raw.get("thoughtsTokenCount"))
    return Usage(input_tokens=count(raw.get("promptTokenCount")) + count(raw.get("toolUsePromptTokenCount")),
                 output_tokens=count(raw.get("candidatesTokenCount")) + thoughts,
                 cache_read_tokens=count(raw.get("cachedContentTokenCount")), reasoning_tokens=thoughts)


def usage_to_gemini(usage: Usage) -> dict[str, Any]:
    """IR usage → `usageMetadata`, in Gemini's sense (candidates without thoughts)."""
    out: dict[str, Any] = {"promptTokenCount": usage.input_tokens,
                           "candidatesTokenCount": max(0, usage.output_tokens - usage.reasoning_tokens),
                           "totalTokenCount": usage.input_tokens + usage.output_tokens}
    if usage.cache_read_tokens:
        out["cachedContentTokenCount"] = usage.cache_read_tokens
    if usage.reasoning_tokens:
        out["thoughtsTokenCount"] = usage.reasoning_tokens
    return out
