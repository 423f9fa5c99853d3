"""Anthropic Message responses from the IR: blocks, stop reasons, usage (docs/protocols.md §4.2, §8.3, §13).

Owns the mapping shared by the non-stream body and the stream encoder: block shapes (a thinking
block always carries a signature — minted by the proxy when the upstream gave none) and tool ids
made safe for Anthropic's `^[a-zA-Z0-9_-]+$`. Stop reasons and usage are the protocol's vocabulary
(`vocabulary`).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from proxy.ir import response as ir
from proxy.ir.custom_calls import function_arguments
from proxy.ir.reasoning import encrypted_to_signature, mint_signature
from proxy.ir.request import OutputPart, ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import Response, Usage
from proxy.protocols.messages.citations import citation_to_anthropic
from proxy.protocols.messages.vocabulary import STOP_REASON_FROM_FINISH, usage_to_anthropic

_UNSAFE_ID = re.compile(r"[^a-zA-Z0-9_-]")


def new_id() -> str:
    return "msg_" + uuid.uuid4().hex[:24]


def tool_id(raw: str) -> str:
    """Anthropic tool ids must match ^[a-zA-Z0-9_-]+$; some upstreams mint ids like `functions.f:0`."""
    return _UNSAFE_ID.sub("_", raw) or "toolu_" + uuid.uuid4().hex[:24]


def tool_input(arguments: str) -> dict[str, Any]:
    """Tool arguments as the object Anthropic requires; text that is not a JSON object is wrapped."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"input": arguments}
    return value if isinstance(value, dict) else {"input": value}


def block(part: OutputPart) -> dict[str, Any]:
    if isinstance(part, ReasoningPart):
        if part.redacted is not None:
            return {"type": "redacted_thinking", "data": part.redacted}
        signature = part.signature or (encrypted_to_signature(part.encrypted) if part.encrypted else None)
        return {"type": "thinking", "thinking": part.text, "signature": signature or mint_signature(part.text)}
    if isinstance(part, ToolCallPart):
        return {"type": "tool_use", "id": tool_id(part.id), "name": part.name,
                "input": tool_input(function_arguments(part))}
    if isinstance(part, TextPart):
        citations = [c for c in (citation_to_anthropic(c, part.text) for c in part.citations) if c]
        return {"type": "text", "text": part.text, "citations": citations} if citations else \
            {"type": "text", "text": part.text}
    if isinstance(part, RefusalPart):
        return {"type": "text", "text": part.text}
    raise TypeError(f"not an output part: {part!r}")


def encode(resp: Response, model: str) -> dict[str, Any]:
    content = [block(p) for p in resp.output if not (isinstance(p, TextPart) and not p.text)]
    reason = resp.finish_reason or ir.STOP
    return {
        "id": resp.id if resp.id.startswith("msg_") else new_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_REASON_FROM_FINISH.get(reason, "end_turn"),
        "stop_sequence": resp.stop_sequence if reason == ir.STOP_SEQUENCE else None,
        "usage": usage_to_anthropic(resp.usage or Usage()),
    }
