"""A fourth wire protocol, `toy`, that exists only in the test suite: proof that a protocol is a
package that registers itself, and that nothing shared has to change for one more.

The wire format, both as a client endpoint and as an upstream:
  request   POST /v1/toy (client) or {base_url}/toy (upstream), header `X-Toy-Key: KEY` upstream,
            body {"model", "prompt", "stream"?}
  answer    {"text", "finish"}                         (finish: stop | length | tool_calls)
  stream    `data: {"text": "…"}` per piece, then `data: {"finish": "…"}`; an error is
            `data: {"toy_error": "…"}` and nothing after it
  error     HTTP status + {"toy_error": "message"}

A config loads it with `protocol_plugins: [tests.toy_protocol]`; importing it registers it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from proxy.config import Upstream
from proxy.errors import invalid
from proxy.ir.events import BlockStart, BlockStop, Delta, Event, Failure, Finish, Start, UsageUpdate
from proxy.ir.request import Message, Request, TextPart
from proxy.ir.response import ErrorInfo, Response, Usage
from proxy.protocols import registry
from proxy.protocols.codec import Answer, ClientSide, Passthrough, Protocol, UpstreamSide
from proxy.protocols.sse import KEEPALIVE_COMMENT, SSEEvent, data_frame

FINISHES = ("stop", "length", "tool_calls")


def validate(body: dict[str, Any]) -> None:
    if not isinstance(body.get("model"), str):
        raise invalid("model", "is required and must be a string")
    if not isinstance(body.get("prompt"), str):
        raise invalid("prompt", "is required and must be a string")


def decode_request(body: dict[str, Any]) -> Request:
    return Request(model=body["model"], messages=[Message("user", [TextPart(body["prompt"])])],
                   stream=bool(body.get("stream")))


def encode_request(req: Request, model: str, upstream: Upstream) -> dict[str, Any]:
    prompt = "\n".join(p.text for m in req.messages for p in m.parts if isinstance(p, TextPart))
    return {"model": model, "prompt": prompt, "stream": req.stream}


def text_of(resp: Response) -> str:
    return "".join(p.text for p in resp.output if isinstance(p, TextPart))


def decode_response(doc: dict[str, Any]) -> Response:
    finish = doc.get("finish") if doc.get("finish") in FINISHES else "stop"
    return Response(id="toy", model="", created=int(time.time()), output=[TextPart(str(doc.get("text") or ""))],
                    finish_reason=finish, usage=Usage())


class ToyStreamEncoder:
    def __init__(self) -> None:
        self.done = False
        self.final: dict[str, Any] | None = None  # nothing for a conversation to keep
        self.dropped: dict[str, int] = {}
        self._text: set[int] = set()  # open text blocks

    def encode(self, ev: Event) -> list[bytes]:
        if self.done:
            return []
        if isinstance(ev, BlockStart) and isinstance(ev.part, TextPart):
            self._text.add(ev.block)
        elif isinstance(ev, Delta) and ev.block in self._text and ev.text:
            return [data_frame({"text": ev.text})]
        elif isinstance(ev, BlockStop):
            self._text.discard(ev.block)
        elif isinstance(ev, Finish):
            self.done = True
            return [data_frame({"finish": ev.reason if ev.reason in FINISHES else "stop"})]
        elif isinstance(ev, Failure):
            return self.fail(ev.error)
        return []

    def keepalive(self) -> list[bytes]:
        return [KEEPALIVE_COMMENT]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.done:
            return []
        self.done = True
        return [data_frame({"toy_error": info.message})]


class ToyStreamDecoder:
    def __init__(self) -> None:
        self._started = self._done = False

    def feed(self, sse: SSEEvent) -> list[Event]:
        if self._done or not sse.data.strip():
            return []
        chunk = json.loads(sse.data)
        out: list[Event] = []
        if not self._started:
            self._started = True
            out += [Start("toy", "", int(time.time())), BlockStart(TextPart(""))]
        if "toy_error" in chunk:
            self._done = True
            return [*out, Failure(ErrorInfo("api_error", str(chunk["toy_error"]), 500))]
        if "text" in chunk:
            out.append(Delta(str(chunk["text"])))
        if "finish" in chunk:
            self._done = True
            out += [BlockStop(), UsageUpdate(Usage()), Finish(chunk["finish"] if chunk["finish"] in FINISHES else "stop")]
        return out

    def close(self) -> list[Event]:
        if self._done:
            return []
        self._done = True
        return [Failure(ErrorInfo("upstream_error", "toy upstream closed its stream early", 502))]


class ToyPassthroughStream:
    """Same protocol both sides: every frame as it came, watched for the end and errors."""

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.failed: ErrorInfo | None = None
        self.done = False
        self.final: dict[str, Any] | None = None  # nothing for a conversation to keep
        self.dropped: dict[str, int] = {}
        self._watch = ToyStreamDecoder()

    def feed(self, sse: SSEEvent) -> list[bytes]:
        for ev in self._watch.feed(sse):
            if isinstance(ev, Finish):
                self.done = True
            elif isinstance(ev, Failure):
                self.done, self.failed = True, ev.error
        return [b"data: " + sse.data + b"\n\n"]

    def close(self) -> list[bytes]:
        return [] if self.done else self.fail(ErrorInfo("upstream_error", "toy upstream closed its stream early", 502))

    def keepalive(self) -> list[bytes]:
        return [KEEPALIVE_COMMENT]

    def fail(self, info: ErrorInfo) -> list[bytes]:
        if self.done:
            return []
        self.done, self.failed = True, info
        return [data_frame({"toy_error": info.message})]


def _error_in_body(doc: dict[str, Any], secrets: tuple[str, ...]) -> ErrorInfo | None:
    return ErrorInfo("api_error", str(doc["toy_error"]), 500) if "toy_error" in doc else None


PROTOCOL = Protocol(
    name="toy",
    title="Toy (test suite only)",
    client=ClientSide(
        path="/v1/toy",
        validate=validate,
        model_and_stream=lambda body: (body["model"], bool(body.get("stream"))),
        decode_request=decode_request,
        encode_response=lambda resp, ex: Answer({"text": text_of(resp), "finish": resp.finish_reason or "stop"}),
        stream_encoder=lambda ex: ToyStreamEncoder(),
        error_body=lambda info: {"toy_error": info.message},
    ),
    upstream=UpstreamSide(
        path="/toy",
        auth_headers=lambda key: {"X-Toy-Key": key},
        encode_request=encode_request,
        decode_response=lambda doc, upstream: decode_response(doc),
        stream_decoder=lambda req, up: ToyStreamDecoder(),
        error_in_body=_error_in_body,
    ),
    passthrough=Passthrough(
        prepare_request=lambda ex, body, model, up: {**body, "model": model},
        normalise_response=lambda body, ex: Answer(body),
        stream_relay=lambda ex, up: ToyPassthroughStream(),
        relayed_error=lambda body, info: body if "toy_error" in body else None,
    ),
)


registry.register(PROTOCOL)
