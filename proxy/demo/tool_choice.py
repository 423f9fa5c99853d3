"""Whether the demo model calls a tool, and which calls it makes: the tool a directive or the prompt
names, else a shell-like one, else the first; its arguments built from the tool's JSON schema
(proxy/demo/json_sample.py), so Codex's shell tool gets a harmless command.

Owns that choice for proxy/demo/scenarios.py, which turns the calls into steps. Reads a tool in
either shape — Chat nests its definition under `function`, Responses keeps it flat.
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.demo import json_sample

# Shell tools by name: Claude Code's, Codex's, gemini-cli's (run_shell_command) and common ones.
SHELL_TOOLS = ("bash", "shell", "exec_command", "shell_command", "local_shell", "run_command", "terminal",
               "run_shell_command")
_RUN_WORDS = re.compile(r"\b(run|execute|exec|list (the )?files|ls)\b", re.IGNORECASE)


def wants_tool(body: dict[str, Any], tools: list[dict[str, Any]], d: dict[str, str], prompt: str) -> bool:
    if "tool" in d or "parallel" in d or "interleave" in d:
        return True
    choice = body.get("tool_choice")
    if choice == "required" or (isinstance(choice, dict) and choice.get("type") in ("function", "custom")):
        return True
    names = [_tool_name(t) for t in tools]
    if any(n and re.search(rf"\b{re.escape(n)}\b", prompt) for n in names):
        return True
    return bool(_RUN_WORDS.search(prompt)) and any(n.lower() in SHELL_TOOLS for n in names)


def calls(tools: list[dict[str, Any]], d: dict[str, str], prompt: str) -> list[tuple[str, str]]:
    specs = [(_tool_name(t), _tool_schema(t)) for t in tools]
    specs = [(n, s) for n, s in specs if n]
    if not specs:
        return []
    named = [s for s in specs if s[0] == d.get("tool") or re.search(rf"\b{re.escape(s[0])}\b", prompt)]
    shells = [s for s in specs if s[0].lower() in SHELL_TOOLS]
    specs = named or shells or specs
    count = 2 if ("parallel" in d or "interleave" in d) else 1
    chosen = [specs[i % len(specs)] for i in range(count)]
    return [(name, json.dumps(json_sample.properties(schema if isinstance(schema, dict) else {}, name, i)))
            for i, (name, schema) in enumerate(chosen)]


def _tool_name(tool: dict[str, Any]) -> str:
    return str(_function(tool).get("name") or "")


def _tool_schema(tool: dict[str, Any]) -> Any:
    return _function(tool).get("parameters")


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    """Chat nests a tool's definition under `function`; Responses keeps it flat."""
    nested = tool.get("function")
    return nested if isinstance(nested, dict) else tool
