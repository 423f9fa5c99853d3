"""A whole (non-streamed) Responses object → the IR response.

Owns reading `protocol: responses` upstream answers: the output items in order — each output_text
(with its annotations, as citations) / refusal content part of a message as a text / refusal part, a
reasoning item as one reasoning part (summary and raw text joined by a blank line, as the stream
decoder joins them) carrying its id and `encrypted_content`, function and custom tool calls — the
usage, the finish reason (`incomplete_details` says why a response stopped short; tool calls mean
`tool_calls`), and the error of a failed response. Item types the IR has no place for are skipped.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from proxy.ir.request import OutputPart, ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import Response
from proxy.protocols.fields import count, objects, text
from proxy.protocols.responses.annotations import citation_from_responses
from proxy.protocols.responses.vocabulary import (
    call_arguments,
    call_id,
    error_from_responses,
    finish_from_responses,
    has_calls,
    usage_from_responses,
)

log = logging.getLogger(__name__)


def decode(doc: dict[str, Any]) -> Response:
    resp = Response(id=text(doc, "id") or "resp_" + uuid.uuid4().hex, model=text(doc, "model"),
                    created=count(doc.get("created_at")) or int(time.time()))
    items = objects(doc, "output")
    resp.output = [part for item in items for part in _parts(item)]
    resp.usage = usage_from_responses(doc.get("usage"))
    if doc.get("status") == "failed" or isinstance(doc.get("error"), dict):
        resp.error = error_from_responses(doc.get("error"))
    else:
        resp.finish_reason = finish_from_responses(doc, has_calls(items))
    return resp


def _parts(item: dict[str, Any]) -> list[OutputPart]:
    itype = item.get("type")
    if itype == "message":
        return [p for c in objects(item, "content") for p in _content(c)]
    if itype == "reasoning":
        return [_reasoning(item)]
    if itype == "function_call":
        return [ToolCallPart(call_id(item), text(item, "name"), call_arguments(item),
                             item_id=text(item, "id") or None)]
    if itype == "custom_tool_call":
        return [ToolCallPart(call_id(item), text(item, "name"), text(item, "input"), "custom",
                             text(item, "id") or None)]
    log.info("skipping an upstream %s item: clients of other protocols have no place for it", itype)
    return []


def _content(part: dict[str, Any]) -> list[OutputPart]:
    ptype = part.get("type")
    if ptype == "output_text":
        citations = [c for c in map(citation_from_responses, objects(part, "annotations")) if c is not None]
        return [TextPart(text(part, "text"), citations=citations)]
    if ptype == "refusal":
        return [RefusalPart(text(part, "refusal"))]
    return []


def _reasoning(item: dict[str, Any]) -> ReasoningPart:
    pieces = [p for key in ("summary", "content") for p in objects(item, key)]
    joined = "\n\n".join(t for t in (text(p, "text") for p in pieces) if t)
    encrypted = item.get("encrypted_content")
    return ReasoningPart(text=joined, encrypted=encrypted if isinstance(encrypted, str) and encrypted else None,
                         id=text(item, "id") or None)

