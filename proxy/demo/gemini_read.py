"""The demo's own reader of Gemini requests: a GenerateContentRequest as the Chat body the scenarios
read (proxy/demo/scenarios.py), for the demo upstream's Gemini face.

Owns that translation, written apart from the proxy's Gemini request decoder on purpose (as the
faces' writers are: a bug shared with the proxy would cancel out in the tests). It carries what a
scenario looks at and nothing more:
- `systemInstruction` → a system message; `contents` roles user / model → user / assistant;
- user parts: text, `inlineData` / `fileData` (as image_url parts); `functionResponse` parts →
  tool messages, each answering a call of the model content before it (by `id` when both have one,
  else the first unanswered call of that name, else the first unanswered one); the result text is
  the `response` object's one string value when it has exactly one (`{"output": …}`, `{"result": …}`,
  what gemini-cli and the proxy send), else its JSON;
- model parts: thought text → `reasoning_content`, text → content, each `functionCall` → a tool call
  (ids made up where Gemini gives none);
- `tools[].functionDeclarations` (`parametersJsonSchema`, or the OpenAPI-subset `parameters` with
  its upper-case type names lowered, as they are in any schema: gemini-cli writes them so even in
  a `responseJsonSchema`) → Chat tools; `toolConfig.functionCallingConfig` → tool_choice;
- field names in snake_case as well as lowerCamelCase (`camel`), as Google's JSON parser takes both;
- `generationConfig`: maxOutputTokens, stopSequences, a JSON `responseMimeType` with its schema →
  response_format, `thinkingConfig.includeThoughts` → reasoning_effort (thoughts are shown only
  when asked for, as Gemini does).
Pure: must not import Flask, requests or gevent.
"""

from __future__ import annotations

import json
from typing import Any

CHOICES = {"NONE": "none", "AUTO": "auto", "VALIDATED": "auto"}
# Values that are the caller's own JSON, whose keys are not field names: left as they are.
OPAQUE = {"args", "response", "parameters", "parametersJsonSchema", "responseSchema", "responseJsonSchema",
          "responseJsonSchemaOrdering"}


def camel(value: Any) -> Any:
    """The request with its field names in lowerCamelCase. Google parses JSON the protobuf way, which
    takes a field's proto name too (`function_call`, `thought_signature`), and google-genai sends
    some that way (`parameters_json_schema`); the rest of the demo reads one spelling."""
    if isinstance(value, list):
        return [camel(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, sub in value.items():
        head, *rest = str(key).split("_")
        name = head + "".join(w[:1].upper() + w[1:] for w in rest)
        out[name] = sub if name in OPAQUE else camel(sub)
    return out


def chat_body(request: dict[str, Any], model: str, stream: bool) -> dict[str, Any]:
    """`request` as the Chat body a scenario reads (`stream`: the answer is streamed)."""
    body: dict[str, Any] = {"model": model, "messages": messages(request), "stream": stream,
                            "stream_options": {"include_usage": True}}
    tools = [_tool(d) for t in _dicts(request.get("tools")) for d in _dicts(t.get("functionDeclarations"))]
    if tools:
        body["tools"] = tools
    calling = (request.get("toolConfig") or {}).get("functionCallingConfig") or {}
    mode = str(calling.get("mode") or "").upper()
    allowed = [n for n in calling.get("allowedFunctionNames") or [] if isinstance(n, str)]
    if mode == "ANY":
        body["tool_choice"] = ({"type": "function", "function": {"name": allowed[0]}} if len(allowed) == 1
                               else "required")
    elif mode in CHOICES:
        body["tool_choice"] = CHOICES[mode]
    body.update(_generation(request.get("generationConfig") or {}))
    return body


def messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    system = request.get("systemInstruction")
    if isinstance(system, dict):
        text = "\n".join(str(p.get("text")) for p in _dicts(system.get("parts")) if isinstance(p.get("text"), str))
        if text:
            out.append({"role": "system", "content": text})
    calls: list[dict[str, Any]] = []  # the previous model content's calls, not yet answered
    made = 0  # ids made up so far
    for content in _dicts(request.get("contents")):
        parts = _dicts(content.get("parts"))
        if content.get("role") == "model":
            message: dict[str, Any] = {"role": "assistant", "content": "".join(
                p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")) or None}
            thoughts = "".join(p["text"] for p in parts if isinstance(p.get("text"), str) and p.get("thought"))
            if thoughts:
                message["reasoning_content"] = thoughts
            calls = []
            for part in parts:
                call = part.get("functionCall")
                if isinstance(call, dict):
                    made += 1
                    calls.append({"id": str(call.get("id") or f"gemini_call_{made}"), "type": "function",
                                  "function": {"name": str(call.get("name") or ""),
                                               "arguments": json.dumps(call.get("args") or {})}})
            if calls:
                message["tool_calls"] = list(calls)
            out.append(message)
            continue
        user: list[dict[str, Any]] = []
        for part in parts:
            if isinstance(part.get("functionResponse"), dict):
                out.append(_result(part["functionResponse"], calls))
            elif isinstance(part.get("text"), str):
                user.append({"type": "text", "text": part["text"]})
            elif isinstance(part.get("inlineData"), dict):
                data = part["inlineData"]
                url = f"data:{data.get('mimeType')};base64,{data.get('data')}"
                user.append({"type": "image_url", "image_url": {"url": url}})
            elif isinstance(part.get("fileData"), dict):
                user.append({"type": "image_url", "image_url": {"url": str(part["fileData"].get("fileUri"))}})
        if user:
            out.append({"role": "user", "content": user})
    return out


def _result(response: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A functionResponse as the tool message answering one of `calls` (which it takes off the list)."""
    name = response.get("name")
    answered = next((c for c in calls if response.get("id") and c["id"] == response.get("id")), None)
    answered = answered or next((c for c in calls if c["function"]["name"] == name), None)
    answered = answered or (calls[0] if calls else None)
    if answered is not None:
        calls.remove(answered)
    value = response.get("response")
    if isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), str):
        text = next(iter(value.values()))
    else:
        text = json.dumps(value)
    return {"role": "tool", "tool_call_id": answered["id"] if answered else f"unanswered_{name}", "content": text}


def _tool(declaration: dict[str, Any]) -> dict[str, Any]:
    schema = declaration.get("parametersJsonSchema")
    schema = lowered(schema if isinstance(schema, dict) else declaration.get("parameters"))
    schema = schema if isinstance(schema, dict) else {}
    function = {"name": str(declaration.get("name") or ""), "parameters": schema or {"type": "object",
                                                                                   "properties": {}}}
    if declaration.get("description"):
        function["description"] = declaration["description"]
    return {"type": "function", "function": function}


def lowered(schema: Any) -> Any:
    """An OpenAPI-subset schema (type names "OBJECT", "STRING", …) as JSON Schema spells its types."""
    if isinstance(schema, list):
        return [lowered(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: lowered(sub) for name, sub in value.items()}
        elif key in ("items", "anyOf"):
            out[key] = lowered(value)
        else:
            out[key] = value
    return out


def _generation(config: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(config.get("maxOutputTokens"), int):
        out["max_tokens"] = config["maxOutputTokens"]
    if config.get("stopSequences"):
        out["stop"] = config["stopSequences"]
    if config.get("responseMimeType") == "application/json":
        schema = lowered(config.get("responseJsonSchema") or config.get("responseSchema"))
        out["response_format"] = ({"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
                                  if isinstance(schema, dict) else {"type": "json_object"})
    thinking = config.get("thinkingConfig") or {}
    if isinstance(thinking, dict) and thinking.get("includeThoughts") and thinking.get("thinkingBudget") != 0:
        out["reasoning_effort"] = str(thinking.get("thinkingLevel") or "medium").lower()
    return out


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
