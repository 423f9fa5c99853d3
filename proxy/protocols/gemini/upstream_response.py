"""A Gemini upstream's whole answer (`generateContent`) → the IR's Response.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from proxy.config import Upstream
from proxy.ir.reasoning import gemini_origin
from proxy.ir.request import TextPart
from proxy.ir.response import Response
from proxy.protocols.fields import obj, objects, text
from proxy.protocols.gemini import answer_parts
from proxy.protocols.gemini.vocabulary import usage_from_gemini


def decode(doc: dict[str, Any], upstream: Upstream) -> Response:
    answer_id = text(doc, "responseId") or uuid.uuid4().hex
    model = text(doc, "modelVersion")
    resp = Response(id=answer_id, model=model, created=int(time.time()),
                    usage=usage_from_gemini(doc.get("usageMetadata")))
    resp.error = answer_parts.blocked(doc)
    if resp.error is not None:
        return resp
    cand = answer_parts.candidate(doc)
    parts = objects(obj(cand, "content"), "parts")
    resp.output, called = answer_parts.whole_parts(parts, gemini_origin(upstream.name, model), answer_id)
    cites = answer_parts.citations(cand)
    texts = [p for p in resp.output if isinstance(p, TextPart)]
    if cites and texts:
        texts[0].citations.extend(cites)
    resp.finish_reason, resp.error = answer_parts.finish(text(cand, "finishReason") or "STOP", called)
    return resp

