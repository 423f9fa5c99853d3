"""Conversation repair: every tool call answered, right after the turn that made it.

Owns the pairing rule every request path applies, and one invariant the request encoders rely on:
after `pair_tool_results`, each assistant message with tool calls is followed by exactly one "tool"
message holding one result per call, in the order of the calls. Clients break it in practice —
history truncated by the client (Claude Code's compaction) leaves calls without results, results
arrive in another order, or results answer calls that are no longer in the history — and strict
upstreams (OpenAI, Anthropic) reject all of these with a 400.

The rule itself (`match_results`) and its wording (`MISSING_RESULT`, `orphan_text`) are shared
with the passthrough paths, which apply it to the raw bodies (each protocol's `tool_pairs`).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.ir.request import Message, Part, TextPart, ToolCallPart, ToolResultPart

MISSING_RESULT = "[Tool result unavailable - conversation history was truncated]"


@dataclass(frozen=True)
class Pairing:
    missing: list[str]  # call ids (in call order, each once) that no result answers
    stray: list[int]  # positions of results that answer no call: an unknown id, or a second answer


def match_results(call_ids: Sequence[str], result_ids: Sequence[str]) -> Pairing:
    """Pair one turn's tool calls with the results that follow them: each call is answered by the
    first result carrying its id; every other result is stray."""
    calls = set(call_ids)
    answered: set[str] = set()
    stray: list[int] = []
    for position, result_id in enumerate(result_ids):
        if result_id in calls and result_id not in answered:
            answered.add(result_id)
        else:
            stray.append(position)
    missing = list(dict.fromkeys(c for c in call_ids if c not in answered))
    return Pairing(missing, stray)


def orphan_text(call_id: str, text: str) -> str:
    """What a result with no call becomes: user text that still says what it was."""
    return f"[Result of tool call {call_id}]: {text}"


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
        run: list[ToolResultPart] = []
        while i < len(messages) and messages[i].role == "tool":
            run += [p for p in messages[i].parts if isinstance(p, ToolResultPart)]
            i += 1
        pairing = match_results([c.id for c in calls], [r.call_id for r in run])
        answers = {r.call_id: r for position, r in enumerate(run) if position not in pairing.stray}
        paired: list[Part] = [
            answers.get(c.id) or ToolResultPart(c.id, [TextPart(MISSING_RESULT)], is_error=True, kind=c.kind)
            for c in calls
        ]
        out.append(Message("tool", paired))
        extra = [run[position] for position in pairing.stray]
        if extra:
            out.append(Message("user", [_as_text(r) for r in extra]))
    return out


def _as_text(result: ToolResultPart) -> TextPart:
    return TextPart(orphan_text(result.call_id, result.text()))
