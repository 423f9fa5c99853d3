"""Responses API response objects from the IR: output items, usage, status,
and the full response object — the non-stream body, and the snapshot every lifecycle event of a
stream carries.

Owns the item shapes strict clients require: a message with `status` and `output_text` parts that
have `annotations: []` and `logprobs: []`; a function_call with `id`, `call_id`, `name`, string
`arguments` and `status: "completed"` (Vercel drops tool calls without it); a reasoning item with
its `summary` array (Codex drops it otherwise); custom tool calls back as `custom_tool_call` items
with the raw `input` (Codex's apply_patch); usage with every detail field as an integer. The
response object echoes the request's settings as the real API does.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from typing import Any

from proxy.ir.reasoning import signature_to_encrypted
from proxy.ir.request import OutputPart, ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import ErrorInfo, Response, Usage
from proxy.protocols.openai_errors import error_body
from proxy.protocols.responses.annotations import annotation
from proxy.protocols.responses.vocabulary import INCOMPLETE_FROM_FINISH, failure_code, usage_to_responses

# Items that are an answer a client can show or act on; one without any gets an empty message.
ANSWER_ITEMS = ("message", "function_call", "custom_tool_call")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def error_event_error(info: ErrorInfo) -> dict[str, Any]:
    """The `error` of the `error` event that precedes `response.failed`."""
    return {"type": error_body(info)["error"]["type"], "code": failure_code(info), "message": info.message,
            "param": None}


def custom_input(arguments: str) -> str:
    """A custom tool's raw input from the one-string-argument function the Chat upstream called."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get("input"), str):
        return str(value["input"])
    return arguments


def text_part(text: str, annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": annotations or [], "logprobs": []}


def message_item(item_id: str, parts: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": parts}


def reasoning_item(item_id: str, text: str, encrypted: str | None, include_encrypted: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"id": item_id, "type": "reasoning",
                            "summary": [{"type": "summary_text", "text": text}] if text else []}
    if include_encrypted:
        item["encrypted_content"] = encrypted
    return item


def _raw_input(call: ToolCallPart) -> str:
    """A custom call's raw input: as the upstream made it (Responses), or from the function form."""
    return call.arguments if call.kind == "custom" else custom_input(call.arguments)


def call_item(item_id: str, call: ToolCallPart, custom: bool, status: str) -> dict[str, Any]:
    if custom:
        return {"id": item_id, "type": "custom_tool_call", "status": status, "call_id": call.id,
                "name": call.name, "input": _raw_input(call) if status == "completed" else ""}
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call.id, "name": call.name,
            "arguments": call.arguments if status == "completed" else ""}


def output_items(parts: Iterable[OutputPart], custom_tools: set[str], include_encrypted: bool,
                 incomplete: bool) -> list[dict[str, Any]]:
    """Whole output items for a complete answer; adjacent text and refusal share one message. An
    answer with no message and no tool call gets an empty message, as the stream encoder sends."""
    items: list[dict[str, Any]] = []
    message: dict[str, Any] | None = None
    for part in parts:
        if isinstance(part, TextPart | RefusalPart):
            if isinstance(part, TextPart) and not part.text:
                continue
            if message is None:
                message = message_item(new_id("msg"), [], "completed")
                items.append(message)
            if isinstance(part, TextPart):
                found = [annotation(c, len(part.text)) for c in part.citations]
                message["content"].append(text_part(part.text, found))
            else:
                message["content"].append({"type": "refusal", "refusal": part.text})
            continue
        message = None
        if isinstance(part, ReasoningPart):
            encrypted = part.encrypted or signature_to_encrypted(part.signature, part.redacted)
            items.append(reasoning_item(part.id or new_id("rs"), part.text, encrypted, include_encrypted))
        elif isinstance(part, ToolCallPart):
            custom = part.kind == "custom" or part.name in custom_tools
            items.append(call_item(part.item_id or new_id("ctc" if custom else "fc"), part, custom, "completed"))
    if not any(item["type"] in ANSWER_ITEMS for item in items):
        items.append(message_item(new_id("msg"), [text_part("")], "completed"))
    if incomplete:
        for item in reversed(items):
            if item["type"] == "message":
                item["status"] = "incomplete"
                break
    return items


class ResponseObject:
    """The response object for one request: settings echoed from the request, state filled in."""

    def __init__(self, body: dict[str, Any], model: str, response_id: str | None = None) -> None:
        self.id = response_id or new_id("resp")
        self.created_at = int(time.time())
        reasoning: dict[str, Any] = body["reasoning"] if isinstance(body.get("reasoning"), dict) else {}
        text: dict[str, Any] = body["text"] if isinstance(body.get("text"), dict) else {}
        self._settings: dict[str, Any] = {
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": body.get("max_tool_calls"),
            "model": model,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
            "safety_identifier": body.get("safety_identifier"),
            "service_tier": body.get("service_tier") or "default",
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": text.get("format") or {"type": "text"}, "verbosity": text.get("verbosity") or "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_logprobs": body.get("top_logprobs", 0),
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation") or "disabled",
            "user": body.get("user"),
            "metadata": body.get("metadata") or {},
        }

    def snapshot(self, status: str, output: list[dict[str, Any]], usage: Usage | None = None,
                 error: ErrorInfo | None = None, finish_reason: str | None = None) -> dict[str, Any]:
        finished = status in ("completed", "incomplete", "failed")
        reason = INCOMPLETE_FROM_FINISH.get(finish_reason or "") if status == "incomplete" else None
        return {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "background": False,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": {"code": failure_code(error), "message": error.message} if error is not None else None,
            "incomplete_details": {"reason": reason} if reason else None,
            "output": output,
            # Vercel requires usage on completed / incomplete; a failed response has it only if known.
            "usage": usage_to_responses(usage) if status in ("completed", "incomplete") or (finished and usage)
            else None,
            **self._settings,
        }


def status_for(finish_reason: str | None) -> str:
    return "incomplete" if finish_reason in INCOMPLETE_FROM_FINISH else "completed"


def encode(resp: Response, body: dict[str, Any], model: str, custom_tools: set[str],
           include_encrypted: bool) -> dict[str, Any]:
    """IR → the non-stream response body."""
    status = status_for(resp.finish_reason)
    items = output_items(resp.output, custom_tools, include_encrypted, incomplete=status == "incomplete")
    return ResponseObject(body, model).snapshot(status, items, resp.usage, finish_reason=resp.finish_reason)
