"""The Gemini error envelope: `{"error": {"code": 400, "message": "…", "status": "INVALID_ARGUMENT"}}`
(google.rpc.Status, as the Gemini API answers), for HTTP bodies and for the error that ends a stream
after its first byte; and an error body or in-band error read from a Gemini upstream.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import KIND_STATUS as DEFAULT_STATUS
from proxy.ir.response import ErrorInfo
from proxy.protocols.fields import text
from proxy.protocols.gemini.vocabulary import KIND_FOR_STATUS_NAME, KIND_STATUS, STATUS_NAMES


def status_for(info: ErrorInfo) -> int:
    """The HTTP status a Gemini client gets for `info` (Google has no 413, 415, 402 or 529)."""
    return KIND_STATUS.get(info.kind, info.status or DEFAULT_STATUS.get(info.kind, 500))


# A client key's spent budget told as a spent daily quota: gemini-cli stops at once on a QuotaFailure
# whose quotaId says PerDay, where any other 429 is retried for about four minutes.
BUDGET_DETAILS = [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                   "violations": [{"quotaId": "LlmProxyBudgetPerDay",
                                   "description": "The client key's budget on this proxy is spent."}]}]


def error_body(info: ErrorInfo) -> dict[str, Any]:
    code = status_for(info)
    error: dict[str, Any] = {"code": code, "message": info.message, "status": STATUS_NAMES.get(code, "UNKNOWN")}
    if info.kind == "budget":
        error["details"] = BUDGET_DETAILS
    return {"error": error}


def error_from_gemini(doc: Any, http_status: int | None = None) -> ErrorInfo | None:
    """The error a Gemini upstream sent (`{"error": {code, message, status}}`, also as a stream
    event or inside a JSON array), or None when `doc` is not one."""
    if isinstance(doc, list) and doc:
        doc = doc[0]
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):
        return None
    name = text(error, "status")
    code = error.get("code") if isinstance(error.get("code"), int) else http_status
    kind = KIND_FOR_STATUS_NAME.get(name) or (None if code is None else _kind_for_code(code))
    kind = kind or "api_error"
    return ErrorInfo(kind=kind, message=text(error, "message") or "upstream error",
                     status=code or DEFAULT_STATUS.get(kind, 500), code=name or None)


def _kind_for_code(code: int) -> str | None:
    name = STATUS_NAMES.get(code)
    return KIND_FOR_STATUS_NAME.get(name) if name else None
