"""Passthrough: a Messages request's tool history repaired on the raw body.

Owns applying the pairing rule (`proxy.ir.repair`) to `messages` as sent, for an Anthropic
upstream, which rejects with a 400 both a `tool_use` whose `tool_result` is not in the next user
turn and a `tool_result` whose `tool_use` is not in the previous assistant turn. Claude Code
truncates its history when it compacts, which leaves exactly these behind. A call without a result
gets a synthetic `tool_result` (`is_error`, saying the result was lost) at the start of the next
user turn; a result without a call becomes a text block saying what it was, after the turn's tool
results (which the API wants first). Every other message, block, field and cache hint goes up as
sent; a history with nothing to repair is returned as the very same list.

Turns are what the API sees: consecutive messages of one role count as one turn (the API merges
them), and mid-conversation `role: "system"` messages sit between turns without ending them.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import logging
from typing import Any

from proxy.ir.repair import MISSING_RESULT, match_results, orphan_text

log = logging.getLogger(__name__)

# Blocks inside a tool result that are valid user content by themselves, kept when it becomes text.
_STANDALONE_BLOCKS = ("image", "document")


def repair_tool_pairs(messages: Any) -> Any:
    """`messages` with every tool_use answered and every tool_result owned by a tool_use."""
    if not isinstance(messages, list):
        return messages
    replaced: dict[int, dict[str, Any]] = {}
    placeholders = strays = 0
    calls: list[str] = []  # the tool_use ids of the assistant turn just before
    last_assistant = -1
    for role, indices in _turns(messages):
        if role == "assistant":
            calls = [str(b.get("id")) for i in indices for b in _blocks(messages[i]) if b.get("type") == "tool_use"]
            last_assistant = indices[-1]
            continue
        fixed, missing, stray = _answer(messages, indices, calls)
        replaced.update(fixed)
        placeholders, strays, calls = placeholders + missing, strays + stray, []
    if not replaced and not calls:
        return messages
    out = [replaced.get(i, m) for i, m in enumerate(messages)]
    if calls:  # the history ends on calls: answer them in a user turn of their own
        out.insert(last_assistant + 1, {"role": "user", "content": _placeholders(calls)})
        placeholders += len(calls)
    log.info("repaired the tool history for the upstream: %d tool_use(s) without a tool_result answered with a "
             "placeholder, %d tool_result(s) without a tool_use turned into text", placeholders, strays)
    return out


def _turns(messages: list[Any]) -> list[tuple[str, list[int]]]:
    """Indices of the user and assistant messages, grouped into turns as the API merges them."""
    turns: list[tuple[str, list[int]]] = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].append(i)
        else:
            turns.append((role, [i]))
    return turns


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _answer(messages: list[Any], indices: list[int], calls: list[str]) -> tuple[dict[int, dict[str, Any]], int, int]:
    """A user turn rewritten so its tool results answer exactly `calls`: the messages that
    changed, how many placeholders were added and how many results became text."""
    results = [(i, j) for i in indices for j, b in enumerate(_blocks(messages[i])) if b.get("type") == "tool_result"]
    pairing = match_results(calls, [str(_blocks(messages[i])[j].get("tool_use_id")) for i, j in results])
    if not pairing.missing and not pairing.stray:
        return {}, 0, 0
    stray_at = {results[k] for k in pairing.stray}
    fixed: dict[int, dict[str, Any]] = {}
    for n, i in enumerate(indices):
        added = _placeholders(pairing.missing) if n == 0 else []
        if not added and not any(at[0] == i for at in stray_at):
            continue
        kept, rest = [], []
        for j, block in enumerate(_blocks(messages[i])):
            if block.get("type") != "tool_result":
                rest.append(block)
            elif (i, j) in stray_at:
                rest += _as_text(block)
            else:
                kept.append(block)
        fixed[i] = {**messages[i], "content": added + kept + rest}
    return fixed, len(pairing.missing), len(pairing.stray)


def _placeholders(call_ids: list[str]) -> list[dict[str, Any]]:
    return [{"type": "tool_result", "tool_use_id": c, "is_error": True, "content": MISSING_RESULT} for c in call_ids]


def _as_text(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A tool_result with no tool_use, as user content: its text, then its images and documents.
    Its cache breakpoint, if any, stays on the text, so the client's caching keeps its shape."""
    content = result.get("content")
    inner = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    text = content if isinstance(content, str) else "".join(str(b.get("text", "")) for b in inner
                                                            if b.get("type") == "text")
    block: dict[str, Any] = {"type": "text", "text": orphan_text(str(result.get("tool_use_id")), text)}
    if result.get("cache_control") is not None:
        block["cache_control"] = result["cache_control"]
    return [block, *(b for b in inner if b.get("type") in _STANDALONE_BLOCKS)]
