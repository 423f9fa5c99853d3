"""Reading a Gemini upstream's answer: what both upstream decoders (whole and streamed) share.

Owns the candidate's parts → IR output parts (protocols.md §9.6 for the signatures: each becomes a
reasoning part whose signature is an envelope marking origin and place), finishReason → the IR's
finish or a failure, a blocked prompt as an error, citations, and an image the model answers with.
The IR has no output image: one reaches a client of another protocol as a Markdown image with a
data URL in the text (a Gemini client in front of a Gemini upstream gets the part itself).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.ir import response as ir
from proxy.ir.reasoning import gemini_envelope
from proxy.ir.request import Citation, OutputPart, ReasoningPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo
from proxy.protocols.fields import obj, objects, text
from proxy.protocols.gemini.vocabulary import FAILED_FINISHES, FINISH_FROM_GEMINI, minted_call_id

PROTOCOL_NAME = __name__.split(".")[-2]  # this package's name: the origin citations say they came in


def candidate(doc: dict[str, Any]) -> dict[str, Any]:
    candidates = objects(doc, "candidates")
    return candidates[0] if candidates else {}


def call_id(call: dict[str, Any], answer_id: str, position: int) -> str:
    """The call's own id, else one minted from the answer and the call's place in it — the same
    every time the answer is read, so a call and its later result agree."""
    given = call.get("id")
    if isinstance(given, str) and given:
        return given
    return minted_call_id(answer_id, position, call.get("name"))


def arguments(call: dict[str, Any]) -> str:
    args = call.get("args")
    return json.dumps(args if isinstance(args, dict) else {}, ensure_ascii=False)


def image_markdown(part: dict[str, Any]) -> str | None:
    """An inline image the model answered with, as Markdown text (the IR carries no output image)."""
    data = obj(part, "inlineData")
    payload, mime = text(data, "data"), text(data, "mimeType")
    if not payload or not mime.startswith("image/"):
        return None
    return f"![image](data:{mime};base64,{payload})"


def blocked(doc: dict[str, Any]) -> ErrorInfo | None:
    """A prompt Gemini refused to answer (`promptFeedback.blockReason`, no candidates)."""
    reason = text(obj(doc, "promptFeedback"), "blockReason")
    if not reason or objects(doc, "candidates"):
        return None
    return ErrorInfo("invalid_request", f"The prompt was blocked by Gemini's safety filters (blockReason {reason}); "
                                        "change the prompt and try again.", 400, code=reason)


def finish(reason: str, called: bool) -> tuple[str | None, ErrorInfo | None]:
    """The IR finish for a finishReason, or the failure it stands for."""
    if reason in FAILED_FINISHES:
        return None, ErrorInfo("upstream_error", FAILED_FINISHES[reason], 502, code=reason)
    finish_reason = FINISH_FROM_GEMINI.get(reason, ir.STOP)
    return (ir.TOOL_CALLS if called and finish_reason == ir.STOP else finish_reason), None


def citations(cand: dict[str, Any]) -> list[Citation]:
    """`citationMetadata.citationSources` (the Gemini API's name; `citations` on Vertex)."""
    meta = obj(cand, "citationMetadata")
    out = []
    for source in objects(meta, "citationSources") or objects(meta, "citations"):
        start, end = source.get("startIndex"), source.get("endIndex")
        extras = {k: v for k, v in source.items() if k not in ("uri", "title", "startIndex", "endIndex")}
        out.append(Citation(kind="url", url=text(source, "uri") or None, title=text(source, "title") or None,
                            start=start if isinstance(start, int) else None, end=end if isinstance(end, int) else None,
                            origin=PROTOCOL_NAME, origin_type="citationSource", extras=extras))
    return out


def whole_parts(parts: list[dict[str, Any]], origin: str, answer_id: str) -> tuple[list[OutputPart], bool]:
    """A whole answer's parts as IR output, and whether it called a function."""
    out: list[OutputPart] = []
    thought = ""  # thought text not yet given to a reasoning part
    called = False
    calls = 0

    def flush(signature: str | None = None) -> None:
        nonlocal thought
        if thought or signature:
            out.append(ReasoningPart(text=thought, signature=signature))
        thought = ""

    for part in parts:
        signature = part.get("thoughtSignature") if isinstance(part.get("thoughtSignature"), str) else None
        if part.get("thought") is True:
            thought += text(part, "text")
            if signature:
                flush(gemini_envelope(signature, origin, "thought"))
        elif isinstance(part.get("functionCall"), dict):
            flush(gemini_envelope(signature, origin, "next") if signature else None)
            call = part["functionCall"]
            out.append(ToolCallPart(id=call_id(call, answer_id, calls), name=text(call, "name"),
                                    arguments=arguments(call)))
            calls += 1
            called = True
        elif text(part, "text") or image_markdown(part):
            flush()
            if signature:
                out.append(ReasoningPart(signature=gemini_envelope(signature, origin, "next")))
            out.append(TextPart(text(part, "text") or image_markdown(part) or ""))
        elif signature:  # an empty part that carries a signature: never dropped
            flush(gemini_envelope(signature, origin, "empty"))
    flush()
    return out, called
