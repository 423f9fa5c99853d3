"""The demo upstream's strictness about tool history: what the real APIs answer, with a 400, to a
tool call whose result is missing or a result whose call is missing (and, for Gemini, a `contents`
entry with no parts or a role other than user and model).

Owns those checks and the real APIs' wording for them, one per protocol face, so a proxy that
forwards a broken history (Claude Code truncates its own when it compacts) gets the error a real
upstream would give rather than an answer. Written apart from the proxy's repair on purpose: it
judges the proxy's output, so it must not share the proxy's code.
Pure: must not import Flask, requests or gevent.
"""

from __future__ import annotations

from typing import Any


def _openai(message: str, param: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}


def _anthropic(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message},
            "request_id": "req_demo_strict"}


def chat_problem(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI: every tool call answered by the tool messages right after it, and no tool message
    that answers nothing."""
    messages = [m if isinstance(m, dict) else {} for m in body.get("messages") or []]
    pending: list[str] = []  # call ids still waiting for their tool message
    callable_ids: set[str] = set()
    calling = -1
    for i, msg in enumerate(messages):
        if msg.get("role") == "tool":
            call_id = msg.get("tool_call_id")
            if call_id not in callable_ids:
                return _openai("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                               "message with 'tool_calls'.", f"messages.[{i}].role")
            pending = [c for c in pending if c != call_id]
            continue
        if pending:
            return _openai("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                           "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                           + ", ".join(pending), f"messages.[{calling}].role")
        calls = msg.get("tool_calls") if msg.get("role") == "assistant" else None
        pending = [str(c.get("id")) for c in calls or [] if isinstance(c, dict)]
        callable_ids, calling = set(pending), i
    if pending:
        return _openai("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                       "'tool_call_id'. The following tool_call_ids did not have response messages: "
                       + ", ".join(pending), f"messages.[{calling}].role")
    return None


def messages_problem(body: dict[str, Any]) -> dict[str, Any] | None:
    """Anthropic: every tool_use answered by a tool_result in the next user turn, and every
    tool_result answering a tool_use of the previous assistant turn (consecutive messages of one
    role are one turn; system messages stand aside)."""
    turns: list[tuple[str, list[int]]] = []
    messages = [m if isinstance(m, dict) else {} for m in body.get("messages") or []]
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role in ("user", "assistant"):
            if turns and turns[-1][0] == role:
                turns[-1][1].append(i)
            else:
                turns.append((role, [i]))
    uses: list[str] = []
    for role, indices in turns:
        blocks = [(i, j, b) for i in indices for j, b in enumerate(_blocks(messages[i]))]
        if role == "assistant":
            uses = [str(b.get("id")) for _, _, b in blocks if b.get("type") == "tool_use"]
            continue
        answered = set()
        for i, j, b in blocks:
            if b.get("type") == "tool_result":
                if b.get("tool_use_id") not in uses:
                    return _anthropic(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                                      f"blocks: {b.get('tool_use_id')}. Each `tool_result` block must have a "
                                      "corresponding `tool_use` block in the previous message.")
                answered.add(b.get("tool_use_id"))
        missing = [u for u in uses if u not in answered]
        if missing:
            return _missing_results(indices[0] - 1, missing)
        uses = []
    return _missing_results(len(messages) - 1, uses) if uses else None


def _missing_results(index: int, ids: list[str]) -> dict[str, Any]:
    return _anthropic(f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately "
                      f"after: {', '.join(ids)}. Each `tool_use` block must have a corresponding `tool_result` "
                      "block in the next message.")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


_OUTPUTS = {"function_call": ("function_call_output", "function call"),
            "custom_tool_call": ("custom_tool_call_output", "custom tool call")}


def responses_problem(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI Responses: every call in `input` has its output, and every output has its call —
    unless `previous_response_id` says the call may be in an earlier response."""
    items = body.get("input")
    if not isinstance(items, list):
        return None
    items = [item if isinstance(item, dict) else {} for item in items]
    calls = {item.get("call_id"): item["type"] for item in items if item.get("type") in _OUTPUTS}
    outputs = {item.get("call_id") for item in items if item.get("type") in {o for o, _ in _OUTPUTS.values()}}
    for call_id, kind in calls.items():
        if call_id not in outputs:
            return _openai(f"No tool output found for {_OUTPUTS[kind][1]} {call_id}.", "input")
    if body.get("previous_response_id"):
        return None
    for item in items:
        for kind, (output, name) in _OUTPUTS.items():
            if item.get("type") == output and calls.get(item.get("call_id")) != kind:
                return _openai(f"No tool call found for {name} output with call_id {item.get('call_id')}.", "input")
    return None


def _google(message: str) -> dict[str, Any]:
    return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}


def gemini_problem(body: dict[str, Any]) -> dict[str, Any] | None:
    """Gemini: `contents` given, each with a valid role and parts; each function response turn right
    after a function call turn, answering as many calls as it made."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return _google("* GenerateContentRequest.contents: contents is not specified\n")
    calls = -1  # functionCall parts of the content before (-1: it was no model content with calls)
    for i, content in enumerate(contents):
        content = content if isinstance(content, dict) else {}
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        if not parts:
            return _google(f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.\n")
        if content.get("role", "user") not in ("user", "model"):
            return _google("Please use a valid role: user, model.")
        responses = sum(1 for p in parts if "functionResponse" in p)
        if responses and calls < 0:
            return _google("Please ensure that function response turn comes immediately after a function call turn.")
        if calls > 0 and content.get("role", "user") == "user" and responses != calls:
            return _google("Please ensure that the number of function response parts is equal to the number of "
                           "function call parts of the function call turn.")
        made = sum(1 for p in parts if "functionCall" in p)
        calls = made if content.get("role") == "model" and made else -1
    return None
