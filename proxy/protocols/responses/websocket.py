"""The Responses API's WebSocket mode, as data: what a client's frames mean and what the proxy's
own frames say (docs/protocols.md §5.5; the conversation state they share with HTTP: §5.4).

Owns the frame shapes, as Codex and the real API use them:
- client frames: `{"type": "response.create", …the body of POST /v1/responses…}`, where
  `generate: false` asks for a warm-up (the response is created and completed with no output, no
  model runs — Codex sends one with its instructions when it connects, then chains its turns on it
  with `previous_response_id`); `{"type": "response.processed", "response_id": …}`, an
  acknowledgement that needs no answer. Anything else is a 400 in an error frame.
- server frames: each event exactly as the SSE stream carries it, one per frame (the stream
  encoders and passthrough write them; the socket only unwraps the SSE framing), and errors that
  the HTTP path would have answered with a status as
  `{"type": "error", "status": N, "error": {…the HTTP error body's error…}, "headers": {…}}` — the
  status is what Codex's retry policy reads (429 and 5xx retried, as over HTTP).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.errors import ProxyError, invalid
from proxy.ir.response import ErrorInfo, Usage
from proxy.protocols.openai_errors import error_body
from proxy.protocols.responses.response import ResponseObject
from proxy.protocols.sse import SSEParser, dumps

CREATE = "response.create"
PROCESSED = "response.processed"
# Fields of a response.create frame that are the socket's, not the request body's.
FRAME_ONLY = ("type", "generate")


def read_frame(data: str | bytes) -> dict[str, Any]:
    """A client frame as a JSON object with a `type`, or a 400 saying what is wrong with it."""
    if isinstance(data, bytes):
        raise invalid("", "Send each request as a text frame holding a JSON object; this endpoint takes no "
                          "binary frames.")
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise invalid("", f"The frame is not valid JSON: {exc}.") from None
    if not isinstance(doc, dict):
        raise invalid("", "The frame must be a JSON object.")
    kind = doc.get("type")
    if kind not in (CREATE, PROCESSED):
        raise invalid("type", f"must be {CREATE!r} or {PROCESSED!r} (got {kind!r}).")
    return doc


def create_body(frame: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A response.create frame → the body POST /v1/responses would have had (always streamed: the
    events are the answer), and whether the model runs (`generate: false` is a warm-up)."""
    generate = frame.get("generate", True)
    if not isinstance(generate, bool):
        raise invalid("generate", "must be a boolean")
    body = {key: value for key, value in frame.items() if key not in FRAME_ONLY}
    body["stream"] = True
    return body, generate


def warm_up(body: dict[str, Any], model: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The events of a `generate: false` response, and the response object to keep for the turns
    that chain on it: created, then completed with no output and no usage spent."""
    obj = ResponseObject(body, model)
    final = obj.snapshot("completed", [], Usage())
    events = [{"type": "response.created", "sequence_number": 0, "response": obj.snapshot("in_progress", [])},
              {"type": "response.completed", "sequence_number": 1, "response": final}]
    return events, final


def error_frame(err: ProxyError, headers: dict[str, str]) -> dict[str, Any]:
    """An error the HTTP path would have answered with a status, as the socket says it: the same
    status and error object (an upstream's own, on passthrough), and the response headers that
    matter to a client (`Retry-After`, the request id)."""
    error: Any = None
    if err.raw_body is not None:
        try:
            error = json.loads(err.raw_body).get("error")
        except (ValueError, AttributeError):
            error = None
    if not isinstance(error, dict):
        error = error_body(err.info)["error"]
    return {"type": "error", "status": err.info.status, "error": error, "headers": {**err.headers, **headers}}


class EventFrames:
    """SSE frames, as the streaming engine yields them, → the JSON text of each event: a socket
    carries the very events the SSE stream would, without the SSE framing (comments carry nothing
    and are dropped)."""

    def __init__(self) -> None:
        self._parser = SSEParser()

    def feed(self, sse: bytes) -> list[str]:
        return [event.data.decode("utf-8", "replace") for event in self._parser.feed(sse)]


def text(event: dict[str, Any]) -> str:
    return dumps(event).decode("utf-8")


def unexpected(message: str) -> ProxyError:
    return ProxyError.from_info(ErrorInfo("api_error", message, 500))
