"""Passthrough: a Chat request's tool history repaired on the raw body.

Owns applying the pairing rule (`proxy.ir.repair`) to `messages` as sent, for an OpenAI-compatible
upstream: OpenAI rejects with a 400 an assistant message whose `tool_calls` are not each answered by
a `tool` message right after it, and a `tool` message that answers no call of the assistant message
before it. A call without an answer gets a synthetic `tool` message (saying the result was lost) at
the end of the run of tool messages; a tool message with no call becomes a user message saying what
it was, after that run. Every other message and field goes up as sent; a history with nothing to
repair is returned as the very same list.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import logging
from typing import Any

from proxy.ir.repair import MISSING_RESULT, match_results, orphan_text

log = logging.getLogger(__name__)


def repair_tool_pairs(messages: Any) -> Any:
    """`messages` with every tool call answered and every tool message answering a call."""
    if not isinstance(messages, list):
        return messages
    out: list[Any] = []
    placeholders = strays = 0
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        if _role(message) == "tool":  # not right after calls (those runs are taken below)
            out.append(_as_user(message))
            strays += 1
            continue
        out.append(message)
        calls = message.get("tool_calls") if _role(message) == "assistant" else None
        call_ids = [str(c.get("id")) for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
        if not call_ids:
            continue
        run = []
        while i < len(messages) and _role(messages[i]) == "tool":
            run.append(messages[i])
            i += 1
        pairing = match_results(call_ids, [str(m.get("tool_call_id")) for m in run])
        out += [m for k, m in enumerate(run) if k not in pairing.stray]
        out += [{"role": "tool", "tool_call_id": c, "content": MISSING_RESULT} for c in pairing.missing]
        out += [_as_user(run[k]) for k in pairing.stray]
        placeholders, strays = placeholders + len(pairing.missing), strays + len(pairing.stray)
    if not placeholders and not strays:
        return messages
    log.info("repaired the tool history for the upstream: %d tool call(s) without a tool message answered with a "
             "placeholder, %d tool message(s) without a call turned into user text", placeholders, strays)
    return out


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _as_user(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    text = content if isinstance(content, str) else "".join(
        str(p.get("text", "")) for p in content or [] if isinstance(p, dict) and p.get("type") == "text")
    return {"role": "user", "content": orphan_text(str(message.get("tool_call_id")), text)}
