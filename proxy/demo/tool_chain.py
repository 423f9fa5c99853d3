"""Two behaviours of the simulated Chat model that agent loops need: a chain of dependent tool
calls, and a DeepSeek-like insistence on getting its reasoning back.

Owns:
- the chain (`[demo:chain=N]`): one tool call per turn, each one's argument built from the
  previous call's output, until N results are in the history; then a text answer quoting every
  output, so a test can see that each result made it back;
- the strict check (`[demo:require-reasoning]`, or a model name containing "strict"): DeepSeek's
  thinking mode answers 400 when an assistant message that carries tool calls comes back without
  its `reasoning_content`, in its own words, naming the message's index;
- the reasoning text for each step, distinct per turn, so a test can tell whether each turn's
  reasoning went back on the right assistant message.
Pure: must not import Flask, requests or gevent.
"""

from __future__ import annotations

import json
import re
from typing import Any

_UNSAFE = re.compile(r"[^A-Za-z0-9 ._-]")


def missing_reasoning(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """DeepSeek's 400 for the first assistant tool-call message without `reasoning_content`."""
    for index, msg in enumerate(messages):
        if msg.get("role") == "assistant" and msg.get("tool_calls") and not isinstance(msg.get("reasoning_content"),
                                                                                       str):
            return {"error": {"message": f"Missing `reasoning_content` field in the assistant message at message "
                                         f"index {index}", "type": "invalid_request_error", "param": None,
                              "code": "invalid_request_error"}}
    return None


def command_output(result: str) -> str:
    """What a command printed. Codex puts a header (chunk id, wall time, exit code) before `Output:`;
    gemini-cli sends `{"output": "<untrusted_context>\nOutput: X\nProcess Group PGID: N\n…"}` — the
    object's text, and after its `Output:` only that line."""
    try:
        doc = json.loads(result)
    except ValueError:
        doc = None
    text = doc["output"] if isinstance(doc, dict) and isinstance(doc.get("output"), str) else result
    if "<untrusted_context>" in text and "Output:" in text:
        return text.rsplit("Output:", 1)[-1].split("\n", 1)[0].strip()
    return text.rsplit("Output:", 1)[-1].strip()


def next_value(outputs: list[str]) -> str:
    """The value the next call is made with: the previous output (made shell-safe) plus this step."""
    step = f"step{len(outputs) + 1}"
    previous = " ".join(_UNSAFE.sub("", command_output(outputs[-1])).split())[:120] if outputs else ""
    return f"{previous} {step}" if previous else step


def depend(args: dict[str, Any], value: str) -> dict[str, Any]:
    """Sampled arguments with the chain's value put in: a shell command echoes it; otherwise the
    first string argument is it."""
    command = args.get("command") or args.get("cmd")
    key = "command" if "command" in args else "cmd"
    if isinstance(command, list):
        return {**args, key: ["bash", "-lc", f"echo {value}"]}
    if isinstance(command, str):
        return {**args, key: f"echo {value}"}
    for name, sample in args.items():
        if isinstance(sample, str):
            return {**args, name: value}
    return {**args, "value": value}


def final_answer(outputs: list[str]) -> str:
    quoted = " | ".join(" ".join(command_output(out).split()) for out in outputs)
    return f"The tools returned, in order: {quoted}. That completes the task."


def thought(step: int, total: int, tool: str | None) -> str:
    """This turn's reasoning: which step it is and what comes next."""
    if tool is None:
        return f"All {total} tool results are in. I will report each of them."
    return f"Step {step} of {total}: I will call {tool} with the previous result."
