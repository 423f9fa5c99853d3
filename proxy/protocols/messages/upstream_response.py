"""A whole (non-streamed) Anthropic Message → the IR response.

Owns reading `protocol: messages` upstream answers: text (with its citations), thinking with its
signature, redacted_thinking and tool_use blocks in order, the stop reason and the usage (whose
`input_tokens` excludes cached tokens; the IR counts them in). Server-tool blocks are skipped.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from proxy.ir import response as ir
from proxy.ir.json_tool import text_from_calls
from proxy.ir.request import OutputPart, ReasoningPart, TextPart, ToolCallPart
from proxy.ir.response import Response
from proxy.protocols.fields import objects
from proxy.protocols.messages.citations import citation_from_anthropic
from proxy.protocols.messages.vocabulary import FINISH_FROM_STOP_REASON, error_from_anthropic, usage_from_anthropic

log = logging.getLogger(__name__)


def decode(doc: dict[str, Any]) -> Response:
    if doc.get("type") == "error":
        return Response(id="", model="", created=int(time.time()), error=error_from_anthropic(doc.get("error")))
    output = [part for block in objects(doc, "content") for part in _part(block)]
    finish = FINISH_FROM_STOP_REASON.get(str(doc.get("stop_reason") or "end_turn"), ir.STOP)
    stop_sequence = doc.get("stop_sequence") if isinstance(doc.get("stop_sequence"), str) else None
    return text_from_calls(Response(id=str(doc.get("id") or ""), model=str(doc.get("model") or ""),
                                    created=int(time.time()), output=output, finish_reason=finish,
                                    stop_sequence=stop_sequence, usage=usage_from_anthropic(doc.get("usage"))))


def _part(block: dict[str, Any]) -> list[OutputPart]:
    btype = block.get("type")
    if btype == "text" and isinstance(block.get("text"), str):
        citations = block.get("citations")
        found = [c for c in map(citation_from_anthropic, citations if isinstance(citations, list) else ()) if c]
        return [TextPart(block["text"], citations=found)]
    if btype == "thinking":
        return [ReasoningPart(text=str(block.get("thinking") or ""), signature=block.get("signature") or None)]
    if btype == "redacted_thinking":
        return [ReasoningPart(redacted=str(block.get("data") or ""))]
    if btype == "tool_use":
        arguments = json.dumps(block.get("input") if isinstance(block.get("input"), dict) else {}, ensure_ascii=False)
        return [ToolCallPart(id=str(block.get("id") or ""), name=str(block.get("name") or ""), arguments=arguments)]
    log.info("skipping an upstream %s block: clients of other protocols have no place for it", btype)
    return []
