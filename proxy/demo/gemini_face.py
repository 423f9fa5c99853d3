"""The demo model's answer in the Gemini API's protocol, for the demo upstream's `/v1beta` face.

Owns writing the scenario's Chat chunks as a stream of GenerateContentResponse objects (SSE
`data: {…}` events with CRLF, as Google sends them, no [DONE]; or, without `alt=sse`, one JSON array
written as it goes), a whole Chat completion as one GenerateContentResponse, the models list and
the error envelope — with templates of its own, never the proxy's encoders, so a bug cannot cancel
out between the proxy and the upstream its tests run against (proxy/demo/faces.py). As Gemini does:
- thoughts are `{"text": …, "thought": true}` parts, one per chunk as they come;
- each function call is one whole `functionCall` part (never argument deltas), all of a step's calls
  in the last chunk, with no `id` (the Gemini API gives none);
- the last chunk has `finishReason` and the authoritative `usageMetadata`; earlier chunks carry a
  partial one (prompt tokens only), which a reader must not add up;
- `candidatesTokenCount` leaves the thoughts out: of the scenario's completion tokens, up to its
  reasoning tokens are `thoughtsTokenCount` and the rest are candidates (so every face reports the
  same output in all);
- `modelVersion` (the model the URL named) and `responseId` on every chunk;
- with `[demo:cache]`, the prompt's prefix the account has sent before (proxy/demo/prompt_cache.py)
  is `cachedContentTokenCount`, inside `promptTokenCount` as Gemini counts it;
- a cited answer (`[demo:cite]`) gets `citationMetadata.citationSources` on its last chunk.
Signed answers (proxy/demo/gemini_signatures.py) carry thought signatures where Gemini 3 puts them:
on the first functionCall of the step (parallel calls: only the first); on the thought — on the
thought part in a whole answer, on an empty text part right after the thought text in a stream
(the placement translators that drop empty parts lose); on the last text part of a text answer.
Pure: must not import Flask, requests or gevent.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from proxy.demo import gemini_signatures as signatures
from proxy.demo.tokens import Write, delta_of, finish_of

STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
          409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL", 501: "NOT_IMPLEMENTED",
          503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}
GEMINI_MODELS = ["gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro", "gemini-3-flash-preview",
                 "gemini-3-pro-preview"]
METHODS = ["generateContent", "countTokens", "createCachedContent", "batchGenerateContent"]


def error_body(status: int, message: str) -> dict[str, Any]:
    """Google's error envelope (google.rpc.Status) for an HTTP status."""
    error: dict[str, Any] = {"code": status, "message": message, "status": STATUS.get(status, "UNKNOWN")}
    if status == 429:  # what per-minute quota ran out, and when to come back, as Gemini says it
        error["details"] = [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
                "quotaId": "GenerateRequestsPerMinutePerProjectPerModel", "quotaValue": "10"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "10s"}]
    return {"error": error}


def model_entry(name: str) -> dict[str, Any]:
    """One entry of `GET /v1beta/models` (and the answer to `GET /v1beta/models/{name}`)."""
    return {"name": f"models/{name}", "baseModelId": name, "version": "001", "displayName": name,
            "description": f"{name}, simulated by the llm-proxy demo upstream", "inputTokenLimit": 1048576,
            "outputTokenLimit": 65536, "supportedGenerationMethods": METHODS, "temperature": 1.0,
            "maxTemperature": 2.0, "topP": 0.95, "topK": 64, "thinking": True}


def model_page(names: list[str], page_size: str | None, page_token: str | None) -> dict[str, Any] | None:
    """A page of the models list: `pageSize` entries (default 50, at most 1000) from `pageToken`
    (the opaque token an earlier page gave); None for a token the demo did not give."""
    size = min(int(page_size), 1000) if page_size and page_size.isdigit() and int(page_size) > 0 else 50
    start = 0
    if page_token:
        if not page_token.startswith("demo-page-") or not page_token[10:].isdigit():
            return None
        start = int(page_token[10:])
    page: dict[str, Any] = {"models": [model_entry(n) for n in names[start:start + size]]}
    if start + size < len(names):
        page["nextPageToken"] = f"demo-page-{start + size}"
    return page


def usage_metadata(usage: dict[str, Any], cached: int = 0) -> dict[str, Any]:
    """Chat usage as `usageMetadata`; `cached`: prompt tokens read from the cache, which Gemini
    counts inside `promptTokenCount` and names again as `cachedContentTokenCount`."""
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    reasoning = int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
    thoughts = min(reasoning, completion)
    out: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": completion - thoughts,
                           "totalTokenCount": prompt + completion,
                           "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    if cached:
        out["cachedContentTokenCount"] = min(cached, prompt)
        out["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": min(cached, prompt)}]
    return out


def _citations(annotations: list[dict[str, Any]]) -> dict[str, Any]:
    """Chat url_citations as the Gemini API's `citationSources` (Vertex AI's `citations`, with a
    title, is "not supported in Gemini API": js-genai's Citation type docs)."""
    return {"citationSources": [{"startIndex": a["url_citation"].get("start_index", 0),
                                 "endIndex": a["url_citation"].get("end_index", 0),
                                 "uri": a["url_citation"].get("url"), "license": ""}
                                for a in annotations if isinstance(a.get("url_citation"), dict)]}


def _call_parts(calls: list[dict[str, Any]], model: str, signed: bool) -> list[dict[str, Any]]:
    parts = []
    for i, call in enumerate(calls):
        part: dict[str, Any] = {"functionCall": call}
        if signed and i == 0:
            part["thoughtSignature"] = signatures.mint(model, "call", call)
        parts.append(part)
    return parts


def _response(parts: list[dict[str, Any]], model: str, response_id: str, **candidate: Any) -> dict[str, Any]:
    return {"candidates": [{"content": {"parts": parts, "role": "model"}, **candidate, "index": 0}],
            "modelVersion": model, "responseId": response_id}


def _response_id() -> str:
    return "demo" + uuid.uuid4().hex[:18]


def whole(completion: dict[str, Any], model: str, signed: bool, cached: int = 0) -> dict[str, Any]:
    """A whole Chat completion as one GenerateContentResponse."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = [{"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"] or "{}")}
             for c in message.get("tool_calls") or ()]
    parts: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        parts.append({"text": message["reasoning_content"], "thought": True})
        if signed:
            parts[-1]["thoughtSignature"] = signatures.mint(model, "thought")
    if message.get("content"):
        parts.append({"text": message["content"]})
        if signed and not calls:
            parts[-1]["thoughtSignature"] = signatures.mint(model, "text")
    parts += _call_parts(calls, model, signed)
    candidate: dict[str, Any] = {"finishReason": FINISH.get(choice.get("finish_reason") or "stop", "STOP")}
    if message.get("annotations"):
        candidate["citationMetadata"] = _citations(message["annotations"])
    answer = _response(parts or [{"text": ""}], model, _response_id(), **candidate)
    answer["usageMetadata"] = usage_metadata(completion.get("usage") or {}, cached)
    return answer


class GeminiStream:
    """Chat chunks in; GenerateContentResponse chunks out (`sse`: as SSE events, else as the
    elements of one JSON array). The last text word is held back until the finish, so the last
    chunk carries it with the finish, the usage and (signed) the text's signature."""

    def __init__(self, write: Write, model: str, signed: bool, sse: bool, prompt_tokens: int,
                 cached: int = 0) -> None:
        self._write, self._model, self._signed, self._sse = write, model, signed, sse
        self._prompt, self._cached = prompt_tokens, cached
        self._id = _response_id()
        self._sent = 0
        self._thinking = False
        self._pending: str | None = None  # the text word held back
        self._calls: dict[int, dict[str, Any]] = {}  # Chat tool call index → name and argument fragments
        self._annotations: list[dict[str, Any]] = []
        self._finish: str | None = None
        self._done = False

    def chunk(self, chunk: dict[str, Any]) -> None:
        if self._done:
            return
        if chunk.get("error"):  # an error mid-stream: one more element, then the connection closes
            self._send({"error": {"code": 500, "message": chunk["error"].get("message", "error"),
                                  "status": "INTERNAL"}})
            self._done = True
            return
        delta = delta_of(chunk)
        if delta.get("reasoning_content"):
            self._thinking = True
            self._parts([{"text": delta["reasoning_content"], "thought": True}])
        if delta.get("content"):
            self._close_thought()
            if self._pending is not None:
                self._parts([{"text": self._pending}])
            self._pending = delta["content"]
        self._annotations += delta.get("annotations") or []
        for call in delta.get("tool_calls") or ():
            entry = self._calls.setdefault(int(call.get("index", 0)), {"name": "", "args": []})
            fn = call.get("function") or {}
            entry["name"] = entry["name"] or fn.get("name") or ""
            entry["args"].append(fn.get("arguments") or "")
        if finish_of(chunk):
            self._finish = finish_of(chunk)
        if chunk.get("usage"):
            self._last(chunk["usage"])

    def end(self) -> None:
        """The scenario ended: a stream that never reported usage still ends with a last chunk."""
        if not self._done:
            self._last({"prompt_tokens": self._prompt, "completion_tokens": 0})
        if not self._sse:
            self._write(b"]" if self._sent else b"[]")

    def _close_thought(self) -> None:
        if self._thinking:
            self._thinking = False
            if self._signed:  # on an empty text part after the thought text, as Gemini streams it
                self._parts([{"text": "", "thoughtSignature": signatures.mint(self._model, "thought")}])

    def _last(self, usage: dict[str, Any]) -> None:
        self._close_thought()
        calls = [{"name": c["name"], "args": json.loads("".join(c["args"]) or "{}")}
                 for _, c in sorted(self._calls.items())]
        parts: list[dict[str, Any]] = []
        if self._pending is not None:
            parts.append({"text": self._pending})
            if self._signed and not calls:
                parts[-1]["thoughtSignature"] = signatures.mint(self._model, "text")
        parts += _call_parts(calls, self._model, self._signed)
        candidate: dict[str, Any] = {"finishReason": FINISH.get(self._finish or "stop", "STOP")}
        if self._annotations:
            candidate["citationMetadata"] = _citations(self._annotations)
        last = _response(parts or [{"text": ""}], self._model, self._id, **candidate)
        last["usageMetadata"] = usage_metadata({"prompt_tokens": self._prompt, **usage}, self._cached)
        self._send(last)
        self._done = True

    def _parts(self, parts: list[dict[str, Any]]) -> None:
        chunk = _response(parts, self._model, self._id)
        chunk["usageMetadata"] = {"promptTokenCount": self._prompt, "totalTokenCount": self._prompt}
        self._send(chunk)

    def _send(self, obj: dict[str, Any]) -> None:
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
        if self._sse:
            self._write(b"data: " + data + b"\r\n\r\n")
        else:
            self._write((b"[" if not self._sent else b",\r\n") + data)
        self._sent += 1
