"""Chat Completions responses: the non-stream body both ways, citations as annotations, and the
normalisation applied to an OpenAI-compatible upstream's body on the passthrough path (usage and
finish reasons are the protocol's vocabulary, in `vocabulary`).

Owns docs/protocols.md §3.2 and the Chat columns of §8 and §13. Pure: no Flask, no requests.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from proxy.ir import response as ir
from proxy.ir.custom_calls import function_arguments
from proxy.ir.request import Citation, ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import Response, Usage
from proxy.protocols.chat_completions import signatures
from proxy.protocols.chat_completions.vocabulary import (
    FINISH_TO_CHAT,
    finish_from_chat,
    matched_stop,
    stopped_after_calls,
    usage_from_chat,
    usage_to_chat,
)
from proxy.protocols.fields import count


def new_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def new_call_id() -> str:
    """An id for a tool call that came without one."""
    return "call_" + uuid.uuid4().hex[:24]


def annotation(citation: Citation, start: int, end: int) -> dict[str, Any] | None:
    """A text part's citation as a Chat `url_citation` annotation, its offsets counted in the whole
    message content (the part's text spans [start, end) there); a citation that covers its whole
    part has none of its own. Chat has no annotation type for anything but URLs: other citations
    (documents, files) stay in the IR and are not sent (docs/protocols.md §11)."""
    if citation.kind != "url" or not citation.url:
        return None
    first = start + citation.start if citation.start is not None else start
    last = start + citation.end if citation.end is not None else end
    return {"type": "url_citation", "url_citation": {"url": citation.url, "title": citation.title or "",
                                                     "start_index": first, "end_index": last}}


def citations_from_chat(annotations: Any, offset: int = 0) -> list[Citation]:
    """A Chat message's (or delta's) `annotations` → citations, offsets made relative to the text
    part that starts at `offset` in the content."""
    found = []
    for raw in annotations if isinstance(annotations, list) else ():
        inner = raw.get("url_citation") if isinstance(raw, dict) else None
        if not isinstance(inner, dict) or not isinstance(inner.get("url"), str):
            continue
        start, end = inner.get("start_index"), inner.get("end_index")
        extras = {k: v for k, v in inner.items() if k not in ("url", "title", "start_index", "end_index")}
        title = inner.get("title")
        found.append(Citation(
            kind="url", url=inner["url"], title=title if isinstance(title, str) else None,
            start=start - offset if isinstance(start, int) else None,
            end=end - offset if isinstance(end, int) else None,
            origin="chat_completions", origin_type=str(raw.get("type") or "url_citation"), extras=extras))
    return found


def decode(body: dict[str, Any]) -> Response:
    """An upstream `chat.completion` body → IR. Only the first choice is translated."""
    choices = body.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    resp = Response(id=str(body.get("id") or new_id()), model=str(body.get("model") or ""),
                    created=count(body.get("created")) or int(time.time()))
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        resp.output.append(ReasoningPart(text=reasoning))
    content = message.get("content")
    if isinstance(content, list):  # a few servers answer with content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if isinstance(content, str) and content:
        resp.output.append(TextPart(content, citations=citations_from_chat(message.get("annotations"))))
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        resp.output.append(RefusalPart(message["refusal"]))
    calls = message.get("tool_calls") or []
    for call in calls:
        fn = call.get("function") or {}
        arguments = fn.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments or {}, ensure_ascii=False)
        resp.output.append(ToolCallPart(id=str(call.get("id") or new_call_id()),
                                        name=str(fn.get("name") or ""), arguments=arguments))
    resp.finish_reason = finish_from_chat(choice.get("finish_reason") or "stop", bool(calls))
    resp.stop_sequence = matched_stop(choice)
    if resp.stop_sequence is not None and resp.finish_reason == ir.STOP:
        resp.finish_reason = ir.STOP_SEQUENCE
    resp.usage = usage_from_chat(body.get("usage"))
    return resp


def encode(resp: Response, model: str) -> dict[str, Any]:
    """IR → the `chat.completion` body a Chat client expects."""
    texts = [p for p in resp.output if isinstance(p, TextPart)]
    text = "".join(p.text for p in texts)
    calls = [p for p in resp.output if isinstance(p, ToolCallPart)]
    refusal = "".join(p.text for p in resp.output if isinstance(p, RefusalPart))
    reasoning = "".join(p.text for p in resp.output if isinstance(p, ReasoningPart))
    annotations, offset = [], 0
    for part in texts:
        for citation in part.citations:
            found = annotation(citation, offset, offset + len(part.text))
            if found is not None:
                annotations.append(found)
        offset += len(part.text)
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else ""),
                               "refusal": refusal or None, "annotations": annotations}
    if reasoning:
        message["reasoning_content"] = reasoning
    own, on_calls = signatures.placed(resp.output)  # Gemini's signatures (signatures.py)
    if own is not None:
        message[signatures.FIELD] = signatures.carried(own)
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": function_arguments(c)},
             **({signatures.FIELD: signatures.carried(on_calls[i])} if i in on_calls else {})}
            for i, c in enumerate(calls)
        ]
    body: dict[str, Any] = {
        "id": resp.id if resp.id.startswith("chatcmpl-") else new_id(),
        "object": "chat.completion",
        "created": resp.created or int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": FINISH_TO_CHAT.get(resp.finish_reason or ir.STOP, "stop")}],
        "usage": usage_to_chat(resp.usage or Usage()),
    }
    return body


def normalise(body: dict[str, Any], model: str) -> dict[str, Any]:
    """Make a compatible server's `chat.completion` body look like OpenAI's, keeping every
    field we do not know: the model the client asked for, the right `object`, an id, and
    `finish_reason: tool_calls` when the message carries tool calls (`stopped_after_calls`)."""
    body["model"] = model
    body["object"] = "chat.completion"
    if not isinstance(body.get("id"), str) or not body["id"]:
        body["id"] = new_id()
    if not count(body.get("created")):
        body["created"] = int(time.time())
    choices = body.get("choices")
    if not isinstance(choices, list):
        body["choices"] = choices = []
    for index, choice in enumerate(choices):
        if not isinstance(choice, dict):
            continue
        choice.setdefault("index", index)
        message = choice.get("message")
        if isinstance(message, dict):
            message["role"] = "assistant"
            if message.get("tool_calls") == []:
                del message["tool_calls"]  # strict validators reject an empty list
            reason = choice.get("finish_reason")
            if reason and stopped_after_calls(reason, bool(message.get("tool_calls"))):
                choice["finish_reason"] = "tool_calls"
    return body
