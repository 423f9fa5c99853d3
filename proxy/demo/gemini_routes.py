"""The demo upstream's Gemini API endpoints, under `/v1beta` (at the server's root or below any
prefix, so a `protocol: gemini` upstream works with `base_url` the root or the `/v1` the demo's
config names):

  POST .../v1beta/models/{model}:generateContent           one GenerateContentResponse
  POST .../v1beta/models/{model}:streamGenerateContent     with ?alt=sse: SSE events; without: one
                                                           JSON array, written as it goes
  POST .../v1beta/models/{model}:countTokens               {contents} or {generateContentRequest}
  POST .../v1beta/models/{model}:embedContent              deterministic vectors (proxy/demo/embeddings.py)
  POST .../v1beta/models/{model}:batchEmbedContents        the same, one a request
  GET  .../v1beta/models?pageSize=&pageToken=              the models list, paged
  GET  .../v1beta/models/{model}                           one entry (any name: the demo serves any)

The same under `/v1` (the Gemini API's stable version, which google-genai 3 uses by default) for a
request that carries a Gemini key (`x-goog-api-key` or `?key=`): there `/v1/models` is otherwise the
OpenAI model list.

Owns that routing — the `:` may come percent-encoded (`%3A`), a `models/` prefix is accepted — and
running the scenario behind it: the request read by the demo's own reader (gemini_read.py), checked
as Gemini checks contents (strict.py) and, when enforced, thought signatures (gemini_signatures.py),
answered by proxy/demo/gemini_face.py. Errors are in Google's envelope; on streamGenerateContent
without `alt=sse` the error is wrapped in an array, as Google sends it. The account key arrives as
`x-goog-api-key` or `?key=` (proxy/demo/upstream.py reads both).
"""

from __future__ import annotations

import json
from typing import Any, Protocol
from urllib.parse import unquote

from proxy.demo import embeddings, faces, gemini_face, gemini_read, scenarios, strict
from proxy.demo import gemini_signatures as signatures
from proxy.demo.http import HTTPRequest, Writer
from proxy.demo.prompt_cache import PromptCache

PREFIX = "/v1beta/models"
STABLE = "/v1/models"
GENERATE = ("generateContent", "streamGenerateContent")
EMBED = ("embedContent", "batchEmbedContents")
NO_KEY = ("Method doesn't allow unregistered callers (callers without established identity). Please use API Key or "
          "other form of API consumer identity to call this API.")


class Host(Protocol):
    """What of the demo upstream (proxy/demo/upstream.py) a Gemini answer runs on."""

    prompt_cache: PromptCache

    def _hang(self, seconds: float, w: Writer, rid: str) -> None: ...

    def _run(self, plan: scenarios.Plan, w: Writer, rid: str) -> None: ...


def handles(req: HTTPRequest) -> bool:
    keyed = bool(req.headers.get("x-goog-api-key") or req.query.get("key"))
    return PREFIX in req.path or (STABLE in req.path and keyed)


def target(path: str) -> tuple[str, str]:
    """The model and method a path names ("" for none): `…/models/NAME:METHOD`, `:` maybe as %3A."""
    rest = unquote(path.split(PREFIX if PREFIX in path else STABLE, 1)[1]).strip("/")
    rest = rest[len("models/"):] if rest.startswith("models/") else rest
    model, _, method = rest.partition(":")
    return model, method


def _json(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def prompt_tokens(chat: dict[str, Any]) -> int:
    """The prompt's tokens as the scenarios count them (countTokens and usage agree)."""
    return max(1, len(json.dumps(chat.get("messages") or [])) // 4)


class _Stream:
    """The face faces.TranslatingWriter runs a scenario's Chat stream through."""

    def __init__(self, model: str, signed: bool, sse: bool, tokens: int, cached: int) -> None:
        self.args = (model, signed, sse, tokens, cached)

    def stream(self, write: Any) -> gemini_face.GeminiStream:
        return gemini_face.GeminiStream(write, *self.args)


def serve(host: Host, req: HTTPRequest, w: Writer, body: Any, key: str, rid: str, first_try: bool,
          names: list[str]) -> None:
    """Answer one request under `/v1beta` (`key`: the account key it came with)."""
    model, method = target(req.path)
    stream, sse = method == "streamGenerateContent", req.query.get("alt") == "sse"

    def fail(status: int, error: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        w.response(status, _json([error] if stream and not sse else error), headers=headers)

    if req.method == "GET" and not method:
        if not model:
            page = gemini_face.model_page(names, req.query.get("pageSize"), req.query.get("pageToken"))
            if page is None:
                return fail(400, gemini_face.error_body(400, "Invalid page token."))
            return w.response(200, _json(page))
        return w.response(200, _json(gemini_face.model_entry(model)))
    if req.method == "POST" and model and method in EMBED and isinstance(body, dict):
        status, answer = embeddings.gemini(method, gemini_read.camel(body))
        return w.response(status, answer if isinstance(answer, bytes) else _json(answer))
    if req.method != "POST" or not model or method not in (*GENERATE, "countTokens"):
        return fail(404, gemini_face.error_body(404, f"Method not found: {req.method} {req.path}"))
    if not isinstance(body, dict):
        return fail(400, gemini_face.error_body(400, "Invalid JSON payload received."))
    body = gemini_read.camel(body)
    if method == "countTokens":
        return _count(body, w)
    problem = strict.gemini_problem(body)
    if problem is not None:
        return fail(400, problem)
    chat = gemini_read.chat_body(body, model, stream)
    try:
        found = scenarios.directives(chat)
        hang = scenarios.hang_before_headers(chat)
    except scenarios.DirectiveError as exc:
        return fail(400, gemini_face.error_body(400, f"demo upstream: {exc}"))
    refused = signatures.refusal(body["contents"], model) if signatures.enforces(model, found) else None
    if refused is not None:
        return fail(400, refused)
    if hang is not None:
        host._hang(hang, w, rid)
    plan = scenarios.plan(chat, chat_face=False, first_try=first_try)
    if plan.error is not None:
        return fail(plan.status, gemini_face.error_body(plan.status, plan.error["error"]["message"]), plan.headers)
    signed = signatures.signs(model, found)
    cached = host.prompt_cache.cached_tokens(key, chat["messages"]) if "cache" in found else 0
    if not stream:
        return w.response(200, _json(gemini_face.whole(plan.body or {}, model, signed, cached)))
    w.start_stream("text/event-stream" if sse else "application/json")
    writer = faces.TranslatingWriter(w, _Stream(model, signed, sse, prompt_tokens(chat), cached))
    host._run(plan, writer, rid)  # type: ignore[arg-type]  # it stands in for the Writer it wraps


def _count(body: dict[str, Any], w: Writer) -> None:
    """countTokens: the tokens of `contents`, or of a whole `generateContentRequest` — one of them."""
    if "contents" in body and "generateContentRequest" in body:
        return w.response(400, _json(gemini_face.error_body(
            400, "contents and generateContentRequest cannot both be set: give one of them.")))
    request = body.get("generateContentRequest") if "generateContentRequest" in body else body
    if not isinstance(request, dict):
        return w.response(400, _json(gemini_face.error_body(400, "generateContentRequest must be an object.")))
    problem = strict.gemini_problem(request)
    if problem is not None:
        return w.response(400, _json(problem))
    tokens = prompt_tokens({"messages": gemini_read.messages(request)})
    return w.response(200, _json({"totalTokens": tokens,
                                  "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens}]}))
