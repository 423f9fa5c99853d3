"""The simulated OpenAI-compatible upstream behind `llm-proxy demo` and the test suite.

Owns the upstream's endpoints — `GET /v1/models`, `POST /v1/chat/completions` executing a
`scenarios.Plan`, `POST /v1/embeddings` (proxy/demo/embeddings.py), and `POST /v1/messages` and
`POST /v1/responses`, the same model behind the
Anthropic and Responses protocols (proxy/demo/faces.py) and the Gemini API's `/v1beta` endpoints
(proxy/demo/gemini_routes.py; keys as `x-goog-api-key` or `?key=`), `DELETE /v1/responses/{id}`
(acknowledged: the demo keeps no responses, tests read the request log) — and a control API under `/_demo/`
that tests use to see what reached the upstream and to steer it:

  GET  /v1/dashboard/balance             {"data": {"total_available": N}}, N fixed per key

  GET  /_demo/requests?request_id=ID     requests received (headers, presented key, JSON body,
                                         the number of the connection it came on)
  POST /_demo/release?request_id=ID      let a `[demo:hold]` stream continue
  GET  /_demo/wait?request_id=ID&timeout=S
                                         block until the proxy hung up on that request's stream
  POST /_demo/keys  {"KEY": {"status": 429, "headers": {...}, "body": {...}, "times": N}}
                                         make requests with that account key fail that way
                                         (the next N times only, when `times` is given);
                    {"KEY": {"hang": true | S}}  send nothing, not even a status line, until the
                                         client goes away (or for S seconds, then answer)
  DELETE /_demo/keys                     forget those failures
  GET  /_demo/progress?request_id=ID     body bytes a scripted stream has sent so far
  POST /_demo/script?request_id=ID  [RESPONSE, …]
                                         answer the next requests with that id with these
                                         responses, one per request (one per retry), exactly:
      {"status": 502, "headers": {…}, "body": "text"}            a whole response
      {"steps": [STEP, …], "chunked": true}                      a 200 event stream, step by step
      {"close": true}                                            read the request, close, no answer
      {"delay": S, …}                                            wait S seconds before answering
    STEP: {"send": "text"} | {"send_hex": "ff00"} | {"sleep": S} | {"hold": true} (until the
          client leaves) | {"trickle": "text", "interval": S} (a byte at a time) | {"close": true}
          | {"repeat": "text", "times": N} (as fast as the client takes it)
          | {"wait": true} (until POST /_demo/release?request_id=ID)

Like the real APIs, every endpoint answers 400 to a tool call without its result or a result
without its call, in the real APIs' words (proxy/demo/strict.py) — and to a directive it cannot
follow (`[demo:words=abc]`, an unknown name), saying which and what it takes.

Requests are matched to tests by the `X-Request-Id` the proxy forwards.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from typing import Any

import gevent
from gevent.event import Event

from proxy.demo import compaction, embeddings, faces, gemini_face, gemini_routes, scenarios, strict
from proxy.demo.http import HTTPRequest, PeerGone, Writer
from proxy.demo.prompt_cache import PromptCache
from proxy.errors import ProxyError, kind_for_status
from proxy.ir.response import ErrorInfo

MODELS = ["demo-model", "demo-reasoner", "gpt-4o-mini", "claude-sonnet-4-6"]


def _json(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _error(message: str, etype: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


class DemoUpstream:
    def __init__(self) -> None:
        self.records: deque[dict[str, Any]] = deque(maxlen=5000)
        self.holds: dict[str, Event] = {}
        self.disconnects: dict[str, Event] = {}
        self.key_faults: dict[str, dict[str, Any]] = {}
        self.scripts: dict[str, list[dict[str, Any]]] = {}
        self.writers: dict[str, Writer] = {}  # the scripted stream of each request id, for its progress
        self.first_keys: dict[str, str] = {}  # request id → the account key it was first tried with
        self.prompt_cache = PromptCache()  # per account: Chat requests with [demo:cache], Messages' cache_control

    def _first_try(self, rid: str, key: str | None) -> bool:
        """Whether this is the first account a request is tried on: a retry on the next account
        carries the same request id with another key."""
        if not rid:
            return True
        if rid not in self.first_keys and len(self.first_keys) >= 5000:
            del self.first_keys[next(iter(self.first_keys))]  # the oldest
        return self.first_keys.setdefault(rid, key or "") == (key or "")

    def __call__(self, req: HTTPRequest, w: Writer) -> None:
        if req.path.startswith("/_demo/"):
            return self._control(req, w)
        key = _presented_key(req.headers) or req.query.get("key")  # Gemini's keys may come as ?key=
        gemini = gemini_routes.handles(req)
        rid = req.headers.get("x-request-id", "")
        record: dict[str, Any] = {"request_id": rid, "method": req.method, "path": req.path, "key": key,
                                  "headers": req.headers, "body": None, "received_at": time.time(),
                                  "connection": req.connection}
        try:
            record["body"] = json.loads(req.body) if req.body else None
        except ValueError:
            record["body"] = req.body.decode("utf-8", "replace")
        self.records.append(record)
        script = self.scripts.get(rid)
        if script:
            return self._scripted(script.pop(0), w, rid)
        if not key and gemini:
            return w.response(403, _json(gemini_face.error_body(403, gemini_routes.NO_KEY)))
        if not key:
            return w.response(401, _json(_error("missing API key", "invalid_request_error", "invalid_api_key")))
        fault = self.key_faults.get(key)
        if fault is not None and "times" in fault:
            if fault["times"] <= 0:
                fault = None
            else:
                fault["times"] -= 1
        if fault is not None and "hang" in fault:
            self._hang(math.inf if fault["hang"] is True else float(fault["hang"]), w, rid)
            fault = None
        if fault is not None:
            message = f"demo fault for this key ({fault.get('status')})"
            body = fault.get("body") or (gemini_face.error_body(int(fault.get("status", 500)), message) if gemini
                                         else _error(message, "demo_error"))
            raw = body if isinstance(body, str) else _json(body)
            return w.response(int(fault.get("status", 500)), raw.encode() if isinstance(raw, str) else raw,
                              headers=fault.get("headers") or {})
        if gemini:
            try:
                return gemini_routes.serve(self, req, w, record["body"], key, rid, self._first_try(rid, key),
                                           MODELS + gemini_face.GEMINI_MODELS)
            except PeerGone:
                self.disconnects.setdefault(rid, Event()).set()
                raise
        if req.method == "GET" and req.path.endswith("/dashboard/balance"):
            # A balance endpoint for the pool's `balance` setting: a stable per-key amount.
            amount = sum(key.encode()) % 1000 / 10
            return w.response(200, _json({"object": "balance", "data": {"total_available": amount}}))
        if req.method == "GET" and req.path.rstrip("/").endswith("/models"):
            data = [{"id": m, "object": "model", "created": 1735689600, "owned_by": "demo"} for m in MODELS]
            return w.response(200, _json({"object": "list", "data": data}))
        if req.method == "POST" and req.path.endswith("/chat/completions"):
            try:
                return self._chat(req, w, record, rid, self._first_try(rid, key))
            except scenarios.DirectiveError as exc:
                return w.response(400, _json(_error(f"demo upstream: {exc}", code="invalid_directive")))
        if req.method == "POST" and req.path.endswith("/embeddings"):
            return w.response(*embeddings.openai(record["body"]))
        if req.method == "POST" and req.path.endswith("/responses/compact"):
            return w.response(200, _json(compaction.compact_answer(record["body"])))
        if req.method == "POST" and req.path.endswith("/responses") and compaction.triggered(record["body"]):
            w.start_stream()
            for frame in compaction.trigger_stream(record["body"]):
                w.send(frame)
            return w.end()
        if req.method == "POST" and req.path.endswith(("/messages", "/responses")):
            return self._face(req.path, w, record, rid, self._first_try(rid, key))
        if req.method == "DELETE" and "/responses/" in req.path:
            deleted = req.path.rsplit("/", 1)[-1]
            return w.response(200, _json({"id": deleted, "object": "response", "deleted": True}))
        return w.response(404, _json(_error(f"demo upstream has no {req.method} {req.path}", code="not_found")))

    # ------------------------------------------------------------ completions

    def _chat(self, req: HTTPRequest, w: Writer, record: dict[str, Any], rid: str, first_try: bool) -> None:
        body = record["body"]
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return w.response(400, _json(_error("body must be a JSON object with messages")))
        problem = strict.chat_problem(body)
        if problem is not None:
            return w.response(400, _json(problem))
        hang = scenarios.hang_before_headers(body)
        if hang is not None:
            self._hang(hang, w, rid)
        plan = scenarios.plan(body, first_try=first_try)
        if plan.error is not None:
            return w.response(plan.status, _json(plan.error), headers=plan.headers)
        usage = (plan.body or {}).get("usage")
        if "cache" in scenarios.directives(body) and isinstance(usage, dict) and record["key"]:
            # The usage object is shared by the whole answer and the stream's usage chunk.
            usage["prompt_tokens_details"] = {"cached_tokens": self.prompt_cache.cached_tokens(
                record["key"], body["messages"])}
        if not body.get("stream"):
            return w.response(200, _json(plan.body))
        w.start_stream()
        try:
            self._run(plan, w, rid)
        except PeerGone:
            self.disconnects.setdefault(rid, Event()).set()
            raise

    def _face(self, path: str, w: Writer, record: dict[str, Any], rid: str, first_try: bool) -> None:
        """The same model behind another protocol's endpoint (see proxy/demo/faces.py)."""
        face_class = faces.FACES["/messages" if path.endswith("/messages") else "/responses"]
        body = record["body"] if path.endswith("/messages") else compaction.expand(record["body"])
        try:
            if not isinstance(body, dict):
                raise ProxyError(400, "body must be a JSON object", "invalid_request")
            check = strict.messages_problem if path.endswith("/messages") else strict.responses_problem
            problem = check(body)
            if problem is not None:
                return w.response(400, _json(problem))
            face = face_class(body)
            hang = scenarios.hang_before_headers(face.chat_body())
        except ProxyError as exc:
            return w.response(exc.info.status, _json(face_class.error_body(exc.info)))
        except scenarios.DirectiveError as exc:
            info = ErrorInfo("invalid_request", f"demo upstream: {exc}", 400)
            return w.response(400, _json(face_class.error_body(info)))
        if hang is not None:
            self._hang(hang, w, rid)
        plan = scenarios.plan(face.chat_body(), chat_face=False, first_try=first_try)
        if plan.error is not None:
            info = ErrorInfo(kind_for_status(plan.status), plan.error["error"]["message"], plan.status)
            return w.response(plan.status, _json(face.error_body(info)), headers=plan.headers)
        if record["key"]:
            face.use_cache(self.prompt_cache, record["key"])
        if not body.get("stream"):
            return w.response(200, _json(face.whole(plan.body or {})))
        w.start_stream()
        try:
            self._run(plan, faces.TranslatingWriter(w, face), rid)  # type: ignore[arg-type]
        except PeerGone:
            self.disconnects.setdefault(rid, Event()).set()
            raise

    def _run(self, plan: scenarios.Plan, w: Writer, rid: str) -> None:
        for step in plan.steps:
            if step.kind == "chunk":
                w.send(b"data: " + _json(step.payload) + b"\n\n")
            elif step.kind == "sleep":
                if step.payload > 0:
                    self._sleep_watching(step.payload, w)
            elif step.kind == "hold":
                released = self.holds.setdefault(rid, Event())
                while not released.wait(0.02):
                    if w.peer_closed():
                        raise PeerGone()
            elif step.kind == "endless":
                n = 0
                while True:
                    w.send(b"data: " + _json(step.payload.chunk({"content": f"tick{n} "})) + b"\n\n")
                    n += 1
                    self._sleep_watching(0.05, w)
            elif step.kind == "drop":
                w.drop()
                return
        if plan.done:
            w.send(b"data: [DONE]\n\n")
        w.end()

    def _hang(self, seconds: float, w: Writer, rid: str) -> None:
        """Send nothing at all for `seconds` (inf: until the client goes away)."""
        try:
            self._sleep_watching(seconds, w)
        except PeerGone:
            self.disconnects.setdefault(rid, Event()).set()
            raise

    def _sleep_watching(self, seconds: float, w: Writer) -> None:
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            gevent.sleep(min(left, 0.05))
            if w.peer_closed():
                raise PeerGone()

    def _scripted(self, answer: dict[str, Any], w: Writer, rid: str) -> None:
        """A fault (or any exact answer) a test asked for."""
        try:
            if answer.get("delay"):
                self._sleep_watching(float(answer["delay"]), w)
            if answer.get("close"):
                w.drop()
                return
            if "steps" not in answer:
                body = answer.get("body", "")
                raw = body.encode() if isinstance(body, str) else _json(body)
                headers = answer.get("headers") or {}
                w.response(int(answer.get("status", 200)), raw, headers.pop("Content-Type", "text/html"), headers)
                return
            w.start_stream(chunked=answer.get("chunked", True))
            self.writers[rid] = w
            for step in answer["steps"]:
                if "send" in step or "send_hex" in step:
                    w.send(step["send"].encode() if "send" in step else bytes.fromhex(step["send_hex"]))
                elif "sleep" in step:
                    self._sleep_watching(float(step["sleep"]), w)
                elif "trickle" in step:
                    for byte in step["trickle"].encode():
                        w.send(bytes([byte]))
                        self._sleep_watching(float(step.get("interval", 1.0)), w)
                elif step.get("wait"):  # until POST /_demo/release?request_id=…
                    released = self.holds.setdefault(rid, Event())
                    while not released.wait(0.02):
                        if w.peer_closed():
                            raise PeerGone()
                elif step.get("hold"):
                    while not w.peer_closed():
                        gevent.sleep(0.02)
                    raise PeerGone()
                elif "repeat" in step:
                    data = step["repeat"].encode()
                    for _ in range(int(step["times"])):
                        w.send(data)
                elif step.get("close"):
                    w.drop()
                    return
            w.end()
        except PeerGone:
            self.disconnects.setdefault(rid, Event()).set()
            raise

    # ------------------------------------------------------------ control

    def _control(self, req: HTTPRequest, w: Writer) -> None:
        rid = req.query.get("request_id", "")
        if req.path == "/_demo/requests":
            found = [r for r in self.records if not rid or r["request_id"] == rid]
            return w.response(200, _json(found))
        if req.path == "/_demo/release":
            self.holds.setdefault(rid, Event()).set()
            return w.response(200, _json({"released": rid}))
        if req.path == "/_demo/wait":
            gone = self.disconnects.setdefault(rid, Event()).wait(float(req.query.get("timeout", "5")))
            return w.response(200, _json({"disconnected": bool(gone)}))
        if req.path == "/_demo/progress":
            writer = self.writers.get(rid)
            return w.response(200, _json({"sent": writer.sent if writer else 0}))
        if req.path == "/_demo/script":
            self.scripts[rid] = list(json.loads(req.body))
            return w.response(200, _json({"scripted": rid, "responses": len(self.scripts[rid])}))
        if req.path == "/_demo/keys":
            if req.method == "DELETE":
                self.key_faults.clear()
            else:
                self.key_faults.update(json.loads(req.body or b"{}"))
            return w.response(200, _json({"faults": list(self.key_faults)}))
        return w.response(404, _json(_error("unknown control path")))


def _presented_key(headers: dict[str, str]) -> str | None:
    for name in ("x-api-key", "x-goog-api-key"):
        if headers.get(name):
            return headers[name]
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
