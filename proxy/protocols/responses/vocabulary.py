"""The Responses protocol's shared vocabulary: usage, finish reasons and error codes as upstreams
speak them, and the small readers of item fields that the stream decoder and the whole-response
decoder both use; and the same words written for Responses clients (usage, why a response is
incomplete, the code of a failed one), by the response object and the passthrough.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from proxy.errors import KIND_FOR_ERROR_TYPE, KIND_STATUS, scrub
from proxy.ir import response as ir
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.fields import count, obj, text

CALL_ITEMS = ("function_call", "custom_tool_call")
FINISH_FROM_INCOMPLETE = {"max_output_tokens": ir.LENGTH, "content_filter": ir.CONTENT_FILTER}
INCOMPLETE_FROM_FINISH = {ir.LENGTH: "max_output_tokens", ir.CONTEXT_WINDOW: "max_output_tokens",
                          ir.CONTENT_FILTER: "content_filter"}
# Responses error codes (SDK ResponseError.code, and those Codex recognises) → the proxy's kinds.
KIND_FROM_CODE = {
    "rate_limit_exceeded": "rate_limit", "slow_down": "rate_limit",
    "server_is_overloaded": "overloaded",
    "insufficient_quota": "billing", "usage_not_included": "billing",
    "server_error": "api_error",
    "vector_store_timeout": "timeout",
    "model_not_found": "not_found",
    "context_length_exceeded": "invalid_request", "invalid_prompt": "invalid_request",
    "bio_policy": "invalid_request", "cyber_policy": "invalid_request",
    "misalignment_policy_violation": "invalid_request",
}
# What Codex and openai-python read in response.failed's error.code. A stream whose upstream went
# silent past the idle deadline fails as the real API's timeouts do.
FAILURE_CODES = {"rate_limit": "rate_limit_exceeded", "overloaded": "server_is_overloaded",
                 "unavailable": "server_is_overloaded", "billing": "insufficient_quota",
                 "invalid_request": "invalid_prompt", "timeout": "request_timeout"}


def usage_from_responses(raw: Any) -> Usage | None:
    """Responses usage → IR usage (both count cached tokens in the input, reasoning in the output)."""
    if not isinstance(raw, dict):
        return None
    prompt, completion = obj(raw, "input_tokens_details"), obj(raw, "output_tokens_details")
    return Usage(input_tokens=count(raw.get("input_tokens")), output_tokens=count(raw.get("output_tokens")),
                 cache_read_tokens=count(prompt.get("cached_tokens")),
                 cache_write_tokens=count(prompt.get("cache_write_tokens")),
                 reasoning_tokens=count(completion.get("reasoning_tokens")))


def usage_to_responses(usage: Usage | None) -> dict[str, Any]:
    u = usage or Usage()
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cache_read_tokens, "cache_write_tokens": u.cache_write_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.total_tokens,
    }


def error_from_responses(error: Any, default_message: str = "upstream reported that the response failed") -> ErrorInfo:
    """A Responses error object — `response.error`, or an `error` event in its nested or flat form."""
    code = text(error, "code")
    kind = KIND_FROM_CODE.get(code) or KIND_FOR_ERROR_TYPE.get(text(error, "type"), "api_error")
    param = error.get("param") if isinstance(error, dict) and isinstance(error.get("param"), str) else None
    return ErrorInfo(kind=kind, message=scrub(text(error, "message") or default_message), status=KIND_STATUS[kind],
                     code=code or None, param=param)


def failure_code(info: ErrorInfo) -> str:
    """The `error.code` of a failed response: the upstream's own code, else the one for the kind."""
    return info.code or FAILURE_CODES.get(info.kind, "server_error")


def finish_from_responses(doc: dict[str, Any], saw_calls: bool, incomplete: bool = False) -> str:
    """The finish reason of a finished response object: incomplete says why; else calls or stop."""
    if incomplete or doc.get("status") == "incomplete" or doc.get("incomplete_details"):
        reason = text(obj(doc, "incomplete_details"), "reason")
        return FINISH_FROM_INCOMPLETE.get(reason, ir.LENGTH)  # any other cut-off still stopped the output
    return ir.TOOL_CALLS if saw_calls else ir.STOP


def call_arguments(item: dict[str, Any]) -> str:
    """A function_call item's arguments as JSON text; a few compatible servers send an object."""
    arguments = item.get("arguments")
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False) if arguments is not None else ""


def call_id(item: dict[str, Any]) -> str:
    """A call item's `call_id`, which its output must name; one is made up when a server left it out."""
    return text(item, "call_id") or "call_" + uuid.uuid4().hex[:24]


def has_calls(output: Any) -> bool:
    return isinstance(output, list) and any(isinstance(i, dict) and i.get("type") in CALL_ITEMS for i in output)
