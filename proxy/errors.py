"""The proxy's errors: one exception type, the kinds it classifies errors into, and parsing of
upstream error bodies in any of the three protocols' shapes.

Owns the protocol-neutral description of what went wrong (`ErrorInfo`); each protocol's
`errors` module renders it in that protocol's envelope. Also owns scrubbing of secrets from any
text that came from an upstream, so an upstream key never reaches a client or a log line.

Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from proxy.ir.response import ErrorInfo

# Kinds, with the HTTP status each one answers with by default.
KIND_STATUS = {
    "invalid_request": 400,
    "authentication": 401,
    "billing": 402,
    "permission": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_too_large": 413,
    "unsupported_media_type": 415,
    "rate_limit": 429,
    "budget": 429,  # a client key's (or its group's) USD budget is spent: each protocol says it as its API does
    "api_error": 500,
    "upstream_error": 502,
    "unavailable": 503,
    "timeout": 504,
    "overloaded": 529,
}


# Upstream error `type` strings → kinds. OpenAI and Anthropic share most names; an in-band stream
# error carries no HTTP status, so its type is all a decoder has to go on.
KIND_FOR_ERROR_TYPE = {
    "invalid_request_error": "invalid_request", "authentication_error": "authentication",
    "billing_error": "billing", "insufficient_quota": "billing", "permission_error": "permission",
    "not_found_error": "not_found", "request_too_large": "request_too_large",
    "rate_limit_error": "rate_limit", "api_error": "api_error", "server_error": "api_error",
    "timeout_error": "timeout", "overloaded_error": "overloaded",
}


def kind_for_status(status: int) -> str:
    for kind, kind_status in KIND_STATUS.items():
        if kind_status == status:
            return kind
    if status == 422 or 400 <= status < 500:
        return "invalid_request"
    return "api_error"


class ProxyError(Exception):
    """Raised anywhere in request handling; the blueprint renders it in the client's protocol."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str | None = None,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        raw_body: bytes | None = None,
    ) -> None:
        super().__init__(message)
        self.info = ErrorInfo(
            kind=kind or kind_for_status(status), message=message, status=status, code=code, param=param
        )
        self.headers = headers or {}
        # An upstream error body already in the client's own protocol, relayed as it came.
        self.raw_body = raw_body

    @classmethod
    def from_info(cls, info: ErrorInfo, headers: dict[str, str] | None = None) -> ProxyError:
        err = cls(info.status, info.message, info.kind, info.code, info.param, headers)
        err.info = info
        return err


def invalid(param: str, problem: str) -> ProxyError:
    """A 400 whose message names the field at fault, e.g. `messages[2].content: must be ...`."""
    return ProxyError(400, f"{param}: {problem}" if param else problem, "invalid_request", param=param or None)


# ---------------------------------------------------------------- upstream error bodies

_TAG = re.compile(rb"<[^>]*>")
_SPACE = re.compile(rb"\s+")
_KEYLIKE = re.compile(r"\b(sk|key|pk|rk)-[A-Za-z0-9_\-*]{6,}")


def parse_upstream_error(status: int, body: bytes, secrets: Iterable[str] = ()) -> ErrorInfo:
    """Understand an upstream error body in OpenAI, Anthropic or ad-hoc shape (or none)."""
    message, utype, code, param = None, None, None, None
    try:
        doc = json.loads(body) if body.strip() else None
    except (ValueError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, dict):  # OpenAI {"error": {...}} and Anthropic {"type":"error","error":{...}}
            message = err.get("message")
            utype = err.get("type")
            code = err.get("code")
            param = err.get("param")
        elif isinstance(err, str):
            message = err
        if message is None:
            for key in ("message", "detail", "msg", "error_description"):
                if isinstance(doc.get(key), str):
                    message = doc[key]
                    break
    if not isinstance(message, str) or not message:
        snippet = _SPACE.sub(b" ", _TAG.sub(b" ", body[:4096])).strip()[:300].decode("utf-8", "replace")
        described = "an empty body" if not body.strip() else (
            f"a non-JSON body: {snippet}" if doc is None else f"an unrecognised JSON body: {snippet}"
        )
        message = f"upstream returned HTTP {status} with {described}"
    kind = kind_for_status(status)
    if status == 529 or utype == "overloaded_error":
        kind = "overloaded"
    return ErrorInfo(
        kind=kind,
        message=scrub(message, secrets),
        status=status,
        code=str(code) if code is not None else None,
        param=str(param) if param is not None else None,
    )


def embedded_error(doc: dict[str, Any], secrets: Iterable[str] = ()) -> ErrorInfo | None:
    """An error object a server put inside a 200 answer — a stream chunk or a whole body — with the
    HTTP status it stands for, so it is judged like the HTTP error it is."""
    err = doc.get("error")
    if not err:
        return None
    status = 500
    if isinstance(err, dict):
        code, etype = err.get("code"), err.get("type")
        if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
            status = code
        elif etype in ("rate_limit_exceeded", "rate_limit_error", "requests") or code == "rate_limit_exceeded":
            status = 429
        elif etype == "overloaded_error":
            status = 529
        elif code == "context_length_exceeded" or etype == "invalid_request_error":
            status = 400
    return parse_upstream_error(status, json.dumps(doc).encode(), secrets)


_KEY_IN_QUERY = re.compile(r"(?i)(^|[?&])((?:api[-_])?key=)[^&]*")


def redact_query_key(text: str, mark: str = "[redacted]") -> str:
    """A URL or query string with the value of its `key=` (or `api_key=`, `api-key=`) parameter — a
    Gemini client's API key — replaced by `mark`."""
    return _KEY_IN_QUERY.sub(lambda m: m.group(1) + m.group(2) + mark, text) if "key=" in text.lower() else text


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove upstream credentials (and anything shaped like an API key) from upstream text."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)
