"""Chat Completions requests from clients: validation and decoding to the IR.

Owns reading the Chat request body (docs/protocols.md §3.1) into `proxy.ir.request`. `validate` is the
light check used on the same-protocol (passthrough) path, where the body goes upstream as sent;
`decode` builds the full IR for translation to other upstreams. The upstream side (IR → Chat body)
is `upstream_request`.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from proxy.errors import invalid
from proxy.ir.repair import pair_tool_results
from proxy.ir.request import (
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    RefusalPart,
    Request,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from proxy.ir.request import Reasoning as ReasoningConfig
from proxy.protocols.chat_completions import signatures
from proxy.protocols.validation import (
    expect,
    get,
    get_objects,
    get_str_or_list,
    get_text,
    join,
    one_of,
    split_data_url,
)

log = logging.getLogger(__name__)

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# Chat fields the IR has no home for; kept in Request.extras so a Chat upstream gets them back.
EXTRA_FIELDS = (
    "n", "logprobs", "top_logprobs", "logit_bias", "store", "service_tier", "prompt_cache_key",
    "prompt_cache_retention", "safety_identifier", "verbosity", "modalities", "audio", "prediction",
    "web_search_options", "thinking", "enable_thinking",
)


def validate(body: dict[str, Any]) -> None:
    """The checks a Chat body must pass before it is relayed as sent: a 400 names the field."""
    get(body, "model", str, "", required=True)
    messages = get(body, "messages", list, "", required=True)
    if not messages:
        raise invalid("messages", "must contain at least one message")
    for i, msg in enumerate(messages):
        path = join("messages", i)
        expect(msg, dict, path)
        if msg.get("role") is None:
            raise invalid(join(path, "role"), "is required")
        one_of(msg["role"], ROLES, join(path, "role"))
        content = msg.get("content")
        if content is not None and not isinstance(content, str | list):
            raise invalid(join(path, "content"), "must be a string or an array of content parts")
        if isinstance(content, list):
            for j, part in enumerate(content):
                expect(part, dict, join(join(path, "content"), j))
        if msg.get("tool_calls") is not None:
            for j, call in enumerate(expect(msg["tool_calls"], list, join(path, "tool_calls"))):
                expect(call, dict, join(join(path, "tool_calls"), j))
    get(body, "stream", bool, "")
    if body.get("tools") is not None:
        for i, tool in enumerate(expect(body["tools"], list, "tools")):
            expect(tool, dict, join("tools", i))
    for key in ("max_tokens", "max_completion_tokens"):
        get(body, key, int, "")
    for key in ("temperature", "top_p"):
        get(body, key, float, "")
    if body.get("stream_options") is not None:
        expect(body["stream_options"], dict, "stream_options")


def decode(body: dict[str, Any]) -> Request:
    validate(body)
    req = Request(model=body["model"], stream=bool(body.get("stream")))
    for i, msg in enumerate(body["messages"]):
        req.messages.append(_decode_message(msg, join("messages", i)))
    req.messages = pair_tool_results(req.messages)  # strict upstreams reject calls or results left alone
    for i, tool in enumerate(body.get("tools") or []):
        decoded = _decode_tool(tool, join("tools", i))
        if decoded is not None:
            req.tools.append(decoded)
    for i, fn in enumerate(get_objects(body, "functions", "")):  # legacy function calling
        req.tools.append(Tool(name=get(fn, "name", str, join("functions", i), required=True),
                              description=fn.get("description"), parameters=fn.get("parameters")))
    req.tool_choice = _decode_tool_choice(body.get("tool_choice", body.get("function_call")))
    req.parallel_tool_calls = get(body, "parallel_tool_calls", bool, "")
    req.max_tokens = get(body, "max_completion_tokens", int, "") or get(body, "max_tokens", int, "")
    req.temperature = get(body, "temperature", float, "")
    req.top_p = get(body, "top_p", float, "")
    req.top_k = get(body, "top_k", int, "")  # not OpenAI, but many compatible servers take it
    req.stop = get_str_or_list(body, "stop", "")
    req.seed = get(body, "seed", int, "")
    req.presence_penalty = get(body, "presence_penalty", float, "")
    req.frequency_penalty = get(body, "frequency_penalty", float, "")
    req.user = get(body, "user", str, "")
    req.metadata = get(body, "metadata", dict, "")
    effort = get(body, "reasoning_effort", str, "")
    if effort:
        req.reasoning = ReasoningConfig(effort=effort)
    req.response_format = _decode_response_format(body.get("response_format"))
    options = body.get("stream_options") or {}
    req.include_usage = bool(options.get("include_usage"))
    req.extras = {k: body[k] for k in EXTRA_FIELDS if k in body}
    return req


def _decode_message(msg: dict[str, Any], path: str) -> Message:
    role = msg["role"]
    content = msg.get("content")
    if role == "tool":
        call_id = get(msg, "tool_call_id", str, path, required=True)
        return Message("tool", [ToolResultPart(call_id=call_id, content=_decode_content(content, path))])
    if role == "function":  # legacy: the result of a function_call, keyed by function name
        name = get(msg, "name", str, path, required=True)
        return Message("tool", [ToolResultPart(call_id=name, content=_decode_content(content, path))])
    parts: list[Part] = []
    own = signatures.carried_envelope(msg) if role == "assistant" else None  # Gemini's (signatures.py)
    where = signatures.placement(own) if own else ""
    if role == "assistant":
        reasoning = msg.get("reasoning_content")
        if (isinstance(reasoning, str) and reasoning) or where in ("thought", "empty"):
            parts.append(ReasoningPart(text=reasoning if isinstance(reasoning, str) else "",
                                       signature=own if where in ("thought", "empty") else None))
        if where == "next":
            parts.append(ReasoningPart(signature=own))
    parts.extend(_decode_content(content, path, allow_refusal=role == "assistant"))
    if where == "prev":
        parts.append(ReasoningPart(signature=own))
    if role == "assistant":
        for j, call in enumerate(msg.get("tool_calls") or []):
            on_call = signatures.carried_envelope(call)
            if on_call is not None:
                parts.append(ReasoningPart(signature=on_call))
            parts.append(_decode_tool_call(call, join(join(path, "tool_calls"), j)))
        legacy = msg.get("function_call")
        if isinstance(legacy, dict) and legacy.get("name"):
            parts.append(ToolCallPart(id=str(legacy["name"]), name=str(legacy["name"]),
                                      arguments=str(legacy.get("arguments") or "")))
    return Message(role, parts, name=msg.get("name"))


def _decode_content(content: Any, path: str, allow_refusal: bool = False) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    parts: list[Any] = []
    for j, part in enumerate(content):
        ppath = join(join(path, "content"), j)
        ptype = part.get("type")
        if ptype == "text":
            parts.append(TextPart(get(part, "text", str, ppath, required=True)))
        elif ptype == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise invalid(join(ppath, "image_url.url"), "must be a string URL")
            detail = image.get("detail") if isinstance(image, dict) else None
            inline = split_data_url(url)
            if inline:
                parts.append(ImagePart(media_type=inline[0], data=inline[1], detail=detail))
            else:
                parts.append(ImagePart(url=url, detail=detail))
        elif ptype == "input_audio":
            audio = get(part, "input_audio", dict, ppath, required=True)
            parts.append(AudioPart(data=str(audio.get("data", "")), format=str(audio.get("format", "wav"))))
        elif ptype == "file":
            file = get(part, "file", dict, ppath, required=True)
            file_data = get_text(file, "file_data", join(ppath, "file"))
            inline = split_data_url(file_data)
            parts.append(FilePart(data=inline[1] if inline else file_data or None,
                                  media_type=inline[0] if inline else None,
                                  filename=get(file, "filename", str, join(ppath, "file")),
                                  file_id=get(file, "file_id", str, join(ppath, "file"))))
        elif ptype == "refusal" and allow_refusal:
            parts.append(RefusalPart(str(part.get("refusal") or "")))
        else:
            log.info("dropping unsupported chat content part type %r at %s", ptype, ppath)
    return parts


def _decode_tool_call(call: dict[str, Any], path: str) -> ToolCallPart:
    call_id = str(call.get("id") or "")
    if call.get("type") == "custom":
        custom = get(call, "custom", dict, path, required=True)
        return ToolCallPart(id=call_id, name=str(custom.get("name") or ""),
                            arguments=str(custom.get("input") or ""), kind="custom")
    fn = get(call, "function", dict, path, required=True)
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):  # some clients send an object; Chat wants JSON text
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return ToolCallPart(id=call_id, name=get(fn, "name", str, join(path, "function"), required=True),
                        arguments=arguments)


def _decode_tool(tool: dict[str, Any], path: str) -> Tool | None:
    ttype = tool.get("type", "function")
    if ttype == "function":
        fn = get(tool, "function", dict, path, required=True)
        return Tool(name=get(fn, "name", str, join(path, "function"), required=True),
                    description=fn.get("description"), parameters=fn.get("parameters"),
                    strict=fn.get("strict"))
    if ttype == "custom":
        custom = get(tool, "custom", dict, path, required=True)
        return Tool(name=get(custom, "name", str, join(path, "custom"), required=True),
                    description=get(custom, "description", str, join(path, "custom")), kind="custom",
                    format=get(custom, "format", dict, join(path, "custom")))
    log.info("dropping chat tool of unsupported type %r at %s", ttype, path)
    return None


def _decode_tool_choice(choice: Any) -> ToolChoice | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice in ("auto", "none", "required"):
            return ToolChoice(choice)  # type: ignore[arg-type]
        raise invalid("tool_choice", f"must be 'auto', 'none', 'required' or an object, not {choice!r}")
    expect(choice, dict, "tool_choice")
    ctype = choice.get("type")
    if ctype == "function" or (ctype is None and "name" in choice):  # legacy function_call {name}
        name = (choice.get("function") or {}).get("name") or choice.get("name")
        return ToolChoice("tool", name=str(name))
    if ctype == "custom":
        return ToolChoice("tool", name=str((choice.get("custom") or {}).get("name")), kind="custom")
    if ctype == "allowed_tools":
        allowed = choice.get("allowed_tools") or {}
        names = [str((t.get("function") or t.get("custom") or t).get("name")) for t in allowed.get("tools") or []]
        mode = "required" if allowed.get("mode") == "required" else "auto"
        return ToolChoice(mode, allowed=names)  # type: ignore[arg-type]
    raise invalid("tool_choice.type", f"must be 'function', 'custom' or 'allowed_tools', not {ctype!r}")


def _decode_response_format(fmt: Any) -> ResponseFormat | None:
    if fmt is None:
        return None
    expect(fmt, dict, "response_format")
    ftype = one_of(fmt.get("type"), ("text", "json_object", "json_schema"), "response_format.type")
    if ftype != "json_schema":
        return ResponseFormat(ftype)  # type: ignore[arg-type]
    schema = get(fmt, "json_schema", dict, "response_format", required=True)
    return ResponseFormat("json_schema", name=schema.get("name"), schema=schema.get("schema"),
                          strict=schema.get("strict"), description=schema.get("description"))


def conversation_key(body: dict[str, Any], headers: Mapping[str, str]) -> str | None:
    """What names a Chat client's conversation: `prompt_cache_key` (OpenAI's own key for routing
    requests that share a prefix to one cache), else `user` (one end user's requests)."""
    for field in ("prompt_cache_key", "user"):
        value = body.get(field)
        if isinstance(value, str) and value:
            return f"{field}:{value}"
    return None
