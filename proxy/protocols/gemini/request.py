"""Gemini `GenerateContentRequest` bodies from a Gemini client → the IR.

Owns reading what gemini-cli and the google-genai SDKs send (`contents` and `systemInstruction`
are `contents`' job): `tools[].functionDeclarations` with `parametersJsonSchema` (JSON Schema, as
given) or `parameters` (the OpenAPI subset: upper-case type names, `nullable`, int64 counts as
strings — rewritten as JSON Schema), `toolConfig.functionCallingConfig`, `generationConfig`
(sampling, `stopSequences`, penalties, `seed`, `candidateCount` 1 only, `responseMimeType` with
`responseJsonSchema` / `responseSchema`, `thinkingConfig`), and the `:countTokens` body. The body is
the request as posted plus `model` (from the URL) plus `URL_KEY` (stream / SSE, from the URL).
Fields with no IR home — `safetySettings`, `cachedContent`, `labels`, Google's own tools
(`googleSearch`, `codeExecution`, …), generationConfig fields such as `responseModalities` — go to
`Request.extras` under their wire names (tools under "tools", generationConfig fields under
"generationConfig"), for a Gemini upstream to put back and others to log.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import ProxyError, invalid
from proxy.ir.repair import pair_tool_results
from proxy.ir.request import Message, Reasoning, Request, ResponseFormat, Tool, ToolChoice
from proxy.protocols.gemini.contents import decode_contents, system_parts, validate_contents
from proxy.protocols.gemini.vocabulary import URL_KEY
from proxy.protocols.validation import expect, get, get_objects, join, one_of

MODES = ("AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED")
LEVELS = ("minimal", "low", "medium", "high")
KNOWN_CONFIG = ("temperature", "topP", "topK", "maxOutputTokens", "stopSequences", "candidateCount",
                "presencePenalty", "frequencyPenalty", "seed", "responseMimeType", "responseSchema",
                "responseJsonSchema", "thinkingConfig")
KNOWN_FIELDS = ("model", URL_KEY, "contents", "systemInstruction", "tools", "toolConfig", "generationConfig")
# OpenAPI Schema fields that are int64, which proto JSON writes as strings ("minItems": "1").
_INT64 = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
# Where a schema holds schemas: by name, or as one schema or a list of them.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SUBSCHEMAS = ("items", "anyOf", "oneOf", "allOf", "not", "additionalProperties", "prefixItems", "if", "then", "else",
               "contains", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "additionalItems")


def include_thoughts(body: dict[str, Any]) -> bool:
    """Whether the client asked to see thought parts (`thinkingConfig.includeThoughts`)."""
    config = body.get("generationConfig")
    thinking = config.get("thinkingConfig") if isinstance(config, dict) else None
    return isinstance(thinking, dict) and thinking.get("includeThoughts") is True


def validate(body: dict[str, Any]) -> None:
    """The shape checks the real API makes, with messages naming the field as Gemini spells it."""
    get(body, "model", str, "", required=True)
    contents = get(body, "contents", list, "", required=True)
    if not contents:
        raise invalid("contents", "must not be empty")
    validate_contents(contents, "contents")
    if body.get("systemInstruction") is not None and not isinstance(body["systemInstruction"], str):
        expect(body["systemInstruction"], dict, "systemInstruction")
    for i, tool in enumerate(get_objects(body, "tools", "")):
        for j, fn in enumerate(get_objects(tool, "functionDeclarations", join("tools", i))):
            path = join(join(join("tools", i), "functionDeclarations"), j)
            get(fn, "name", str, path, required=True)
            get(fn, "parameters", dict, path)
            if fn.get("parameters") is not None and fn.get("parametersJsonSchema") is not None:
                raise invalid(join(path, "parametersJsonSchema"), "cannot be given together with parameters")
    tool_config = get(body, "toolConfig", dict, "")
    calling = get(tool_config, "functionCallingConfig", dict, "toolConfig") if tool_config else None
    if calling:
        path = "toolConfig.functionCallingConfig"
        if calling.get("mode") is not None:
            one_of(str(calling["mode"]).upper() if isinstance(calling["mode"], str) else calling["mode"], MODES,
                   join(path, "mode"))
        names = get(calling, "allowedFunctionNames", list, path) or []
        for k, name in enumerate(names):
            expect(name, str, join(join(path, "allowedFunctionNames"), k))
    config = get(body, "generationConfig", dict, "")
    if config is not None:
        _validate_config(config)


def _validate_config(config: dict[str, Any]) -> None:
    path = "generationConfig"
    for key in ("temperature", "topP", "presencePenalty", "frequencyPenalty", "topK"):
        get(config, key, float, path)
    for key in ("maxOutputTokens", "seed", "candidateCount"):
        get(config, key, int, path)
    if config.get("candidateCount") not in (None, 1):
        raise invalid(join(path, "candidateCount"), "only 1 candidate is supported")
    if config.get("maxOutputTokens") is not None and config["maxOutputTokens"] < 1:
        raise invalid(join(path, "maxOutputTokens"), "must be at least 1")
    stops = get(config, "stopSequences", list, path) or []
    for k, stop in enumerate(stops):
        expect(stop, str, join(join(path, "stopSequences"), k))
    get(config, "responseMimeType", str, path)
    get(config, "responseSchema", dict, path)
    thinking = get(config, "thinkingConfig", dict, path)
    if thinking is not None:
        tpath = join(path, "thinkingConfig")
        get(thinking, "thinkingBudget", int, tpath)
        get(thinking, "includeThoughts", bool, tpath)
        level = thinking.get("thinkingLevel")
        if level is not None:
            one_of(level.lower() if isinstance(level, str) else level, LEVELS, join(tpath, "thinkingLevel"))


def decode(body: dict[str, Any]) -> Request:
    validate(body)
    stream = bool((body.get(URL_KEY) or {}).get("stream"))
    req = Request(model=body["model"], stream=stream, include_usage=stream)
    if body.get("systemInstruction") is not None:
        system = system_parts(body["systemInstruction"], "systemInstruction")
        if system:
            req.messages.append(Message("system", system))
    req.messages += pair_tool_results(decode_contents(body["contents"]))
    _decode_tools(body, req)
    _decode_config(body.get("generationConfig") or {}, req)
    req.extras.update({k: v for k, v in body.items() if k not in KNOWN_FIELDS})
    return req


def count_tokens_request(body: dict[str, Any]) -> Request:
    """A `:countTokens` body — `{contents}` or `{generateContentRequest}`, never both — as the
    request whose prompt is counted."""
    has_contents, has_inner = body.get("contents") is not None, body.get("generateContentRequest") is not None
    if has_contents and has_inner:
        raise invalid("generateContentRequest", "give either contents or generateContentRequest, not both")
    if has_inner:
        inner = expect(body["generateContentRequest"], dict, "generateContentRequest")
        try:
            return decode({**inner, "model": body.get("model")})
        except ProxyError as exc:  # name the field inside generateContentRequest
            if not exc.info.param or exc.info.param == "model":
                raise
            problem = exc.info.message.split(": ", 1)[-1]
            raise invalid(f"generateContentRequest.{exc.info.param}", problem) from exc
    if not has_contents:
        raise invalid("contents", "is required (or generateContentRequest)")
    return decode({"contents": body["contents"], "model": body.get("model")})


# ---------------------------------------------------------------- tools


def json_schema(schema: Any, openapi: bool = True) -> Any:
    """A Gemini schema as JSON Schema: type names lower-cased ("OBJECT" → "object", as gemini-cli
    writes them); with `openapi` (the `parameters` / `responseSchema` subset) also `nullable` →
    a "null" type, int64 counts from strings, and Gemini's `propertyOrdering` left out."""
    if isinstance(schema, list):
        return [json_schema(s, openapi) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            if value.upper() != "TYPE_UNSPECIFIED":
                out[key] = value.lower()
        elif key == "type" and isinstance(value, list):
            out[key] = [v.lower() if isinstance(v, str) else v for v in value]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: json_schema(s, openapi) for name, s in value.items()}
        elif key in _SUBSCHEMAS:
            out[key] = json_schema(value, openapi)
        elif openapi and key in ("nullable", "propertyOrdering"):
            continue
        elif openapi and key in _INT64 and isinstance(value, str) and value.isdigit():
            out[key] = int(value)
        else:
            out[key] = value
    if openapi and schema.get("nullable") is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        elif isinstance(out.get("anyOf"), list):
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out


def _decode_tools(body: dict[str, Any], req: Request) -> None:
    others: list[dict[str, Any]] = []
    for tool in body.get("tools") or []:
        declarations = tool.get("functionDeclarations") or []
        for fn in declarations:
            if fn.get("parametersJsonSchema") is not None:
                params = json_schema(fn["parametersJsonSchema"], openapi=False)
            elif fn.get("parameters") is not None:
                params = json_schema(fn["parameters"])
            else:
                params = {"type": "object", "properties": {}}
            req.tools.append(Tool(name=fn["name"], description=fn.get("description"),
                                  parameters=params if isinstance(params, dict) else {"type": "object"}))
        rest = {k: v for k, v in tool.items() if k != "functionDeclarations"}
        if rest:
            others.append(rest)  # Google's own tools (googleSearch, codeExecution, urlContext, …)
    if others:
        req.extras["tools"] = others
    calling = (body.get("toolConfig") or {}).get("functionCallingConfig")
    if isinstance(calling, dict):
        mode = str(calling.get("mode") or "AUTO").upper()
        names = calling.get("allowedFunctionNames") or None
        if mode == "NONE":
            req.tool_choice = ToolChoice("none")
        elif mode == "ANY":
            req.tool_choice = ToolChoice("tool", name=names[0]) if names and len(names) == 1 else \
                ToolChoice("required", allowed=names)
        else:
            req.tool_choice = ToolChoice("auto", allowed=names)
    rest_config = {k: v for k, v in (body.get("toolConfig") or {}).items() if k != "functionCallingConfig"}
    if rest_config:
        req.extras["toolConfig"] = rest_config


# ---------------------------------------------------------------- generationConfig


def _decode_config(config: dict[str, Any], req: Request) -> None:
    req.temperature = config.get("temperature")
    req.top_p = config.get("topP")
    top_k = config.get("topK")
    req.top_k = int(top_k) if top_k is not None else None
    req.max_tokens = config.get("maxOutputTokens")
    req.stop = list(config.get("stopSequences") or [])
    req.presence_penalty = config.get("presencePenalty")
    req.frequency_penalty = config.get("frequencyPenalty")
    req.seed = config.get("seed")
    req.response_format = _response_format(config)
    thinking = config.get("thinkingConfig")
    if isinstance(thinking, dict):
        req.reasoning = _reasoning(thinking)
    rest = {k: v for k, v in config.items() if k not in KNOWN_CONFIG}
    if rest:
        req.extras["generationConfig"] = rest


def _response_format(config: dict[str, Any]) -> ResponseFormat | None:
    mime = config.get("responseMimeType")
    if config.get("responseJsonSchema") is not None:
        schema = json_schema(config["responseJsonSchema"], openapi=False)
    elif config.get("responseSchema") is not None:
        schema = json_schema(config["responseSchema"])
    elif mime == "application/json":
        return ResponseFormat("json_object")
    else:
        return None
    if mime not in (None, "application/json") or not isinstance(schema, dict):
        return None  # text/x.enum and the like: no IR equivalent
    return ResponseFormat("json_schema", name="response", schema=schema)


def _reasoning(thinking: dict[str, Any]) -> Reasoning | None:
    """thinkingConfig → IR reasoning: a budget of 0 turns thinking off, -1 leaves its size to the
    model (on, no budget), a level is an effort; `includeThoughts` asks for summaries."""
    out = Reasoning()
    budget = thinking.get("thinkingBudget")
    if budget == 0:
        out.enabled = False
    elif isinstance(budget, int) and budget > 0:
        out.enabled, out.budget_tokens = True, budget
    elif budget == -1:
        out.enabled = True
    level = thinking.get("thinkingLevel")
    if isinstance(level, str) and level.lower() in LEVELS:
        out.effort = level.lower()
        out.enabled = True
    if thinking.get("includeThoughts") is True:
        out.summary = "auto"
        if out.enabled is None:
            out.enabled = True
    return out if out != Reasoning() else None
