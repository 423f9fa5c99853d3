"""Conversation repair: every tool call answered, right after the turn that made it.

Owns one invariant the request encoders rely on: after `pair_tool_results`, each assistant message
with tool calls is followed by exactly one "tool" message holding one result per call, in the
order of the calls. Clients break it in practice — history truncated by the client (Claude Code's
compaction) leaves calls without results, results arrive in another order, or results answer calls
that are no longer in the history — and strict upstreams (OpenAI, Anthropic) reject all of these.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from proxy.ir.request import Message, Part, TextPart, ToolCallPart, ToolResultPart

MISSING_RESULT = "[Tool result unavailable - conversation history was truncated]"


def pair_tool_results(messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    i = 0
    while i < len(messages):
        msg = messages[i]
        i += 1
        if msg.role == "tool":
            # Results with no calling turn just before them: keep their content as user text.
            orphans = [p for p in msg.parts if isinstance(p, ToolResultPart)]
            if orphans:
                out.append(Message("user", [_as_text(r) for r in orphans]))
            continue
        out.append(msg)
        calls = [p for p in msg.parts if isinstance(p, ToolCallPart)] if msg.role == "assistant" else []
        if not calls:
            continue
        results: dict[str, ToolResultPart] = {}
        extra: list[ToolResultPart] = []
        while i < len(messages) and messages[i].role == "tool":
            for part in messages[i].parts:
                if isinstance(part, ToolResultPart):
                    if part.call_id in {c.id for c in calls} and part.call_id not in results:
                        results[part.call_id] = part
                    else:
                        extra.append(part)
            i += 1
        paired: list[Part] = [
            results.get(c.id) or ToolResultPart(c.id, [TextPart(MISSING_RESULT)], is_error=True, kind=c.kind)
            for c in calls
        ]
        out.append(Message("tool", paired))
        if extra:
            out.append(Message("user", [_as_text(r) for r in extra]))
    return out


def _as_text(result: ToolResultPart) -> TextPart:
    return TextPart(f"[Result of tool call {result.call_id}]: {result.text()}")
