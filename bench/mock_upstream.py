"""A fast mock LLM upstream for the benchmarks: Chat Completions, Anthropic Messages, OpenAI
Responses and Google Gemini on one port, in its own process.

    python bench/mock_upstream.py (--fd N | --port P) [--parent-pid PID]

Owns the upstream side of every benchmark: a hand-written HTTP/1.1 server on asyncio (uvloop if
importable) with keep-alive, Content-Length request bodies and chunked responses, serving
`POST …/chat/completions`, `…/messages`, `…/responses` (streamed and not), Gemini's
`POST …/models/{model}:streamGenerateContent` (answered as SSE, as with `?alt=sse`, the only form
the proxy asks for) and `…:generateContent`, and `GET …/models` (Gemini's list shape under
`/v1beta/models`, OpenAI's elsewhere).
It must be far cheaper than any proxy in front of it, so everything that does not change is
serialised once at import and a streamed event is a single `%` format and one write.

Every streamed text delta (or tool-argument fragment) is `t<time.time_ns()> ` — the time it was
written — so a client of any protocol, after any translation, can compute delivery delay.

Gemini never streams a function call's arguments: a call is one whole `functionCall` part. So the
Gemini face's tool scenario streams the N deltas as text (the model narrating before it calls) and
then sends the call in one chunk with arguments `{"a": "t<ns> "}` stamped when it is written — N+1
stamped deltas, each as fresh as on the other faces. The last chunk of every Gemini stream carries
finishReason STOP, usageMetadata and an empty text part, as Google's do; there is no [DONE].

Scenario parameters come from the request: body fields `bench_chunks` (default 50),
`bench_interval_ms` (default 20) and `bench_tool` (bool), or — because the proxy forwards unknown
body fields only on same-protocol passthrough — a `[bench:chunks=50,interval=20,tool=0]` tag in
the prompt text (the last tag in the body wins; it is read from the raw body, so it is found in
Chat `messages`, Anthropic `messages`, Responses `input` and Gemini `contents[].parts[].text` alike).
Whether to stream is the body's `stream` field, or for Gemini the call named in the path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import socket
import sys
import time
from dataclasses import dataclass

MODEL = b"bench-model"
TEXT_200 = ("The quick brown fox jumps over the lazy dog. " * 5)[:200]
TAG = re.compile(rb"\[bench:([^\]]*)\]")
OPEN_ARGS = b'{\\"a\\":\\"'  # tool arguments are {"a": "<stamps…>"}, JSON-escaped inside the event
CLOSE_ARGS = b'\\"}'


@dataclass
class Scenario:
    chunks: int = 50
    interval_ms: float = 20.0
    tool: bool = False


def scenario_from(body: bytes, obj: dict) -> Scenario:
    """Body fields first, then a prompt tag (which survives translation) overrides them."""
    sc = Scenario(int(obj.get("bench_chunks", 50)), float(obj.get("bench_interval_ms", 20)),
                  bool(obj.get("bench_tool", False)))
    tags = TAG.findall(body)
    if tags:
        for item in tags[-1].decode("latin-1").split(","):
            key, _, value = item.partition("=")
            if key.strip() == "chunks":
                sc.chunks = int(value)
            elif key.strip() == "interval":
                sc.interval_ms = float(value)
            elif key.strip() == "tool":
                sc.tool = value.strip() not in ("0", "false", "")
    return sc


def frame(payload: bytes) -> bytes:
    """One HTTP chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def sse(event: str | None, data: dict | bytes) -> bytes:
    raw = data if isinstance(data, bytes) else json.dumps(data, separators=(",", ":")).encode()
    return (b"event: %s\n" % event.encode() if event else b"") + b"data: " + raw + b"\n\n"


class PreSerialisedStream:
    """A stream whose frames are all serialised once: subclasses give the start, the delta (text or
    tool arguments) with a %s for the send stamp, the tail with a %s for the stop reason, and the
    stop reasons for text and for a tool call."""

    START_TEXT = START_TOOL = TEXT = ARGS = TAIL = b""
    STOP_REASONS = (b"", b"")

    def __init__(self, tool: bool) -> None:
        self.tool = tool

    def start(self) -> bytes:
        return self.START_TOOL if self.tool else self.START_TEXT

    def delta(self, stamp: bytes) -> bytes:
        return frame((self.ARGS if self.tool else self.TEXT) % stamp)

    def end(self) -> bytes:
        if self.tool:
            return frame(self.ARGS % CLOSE_ARGS) + frame(self.TAIL % self.STOP_REASONS[1])
        return frame(self.TAIL % self.STOP_REASONS[0])


# ---------------------------------------------------------------- Chat Completions

CHAT_ID = b'"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-model"'
CHAT_USAGE = {"prompt_tokens": 25, "completion_tokens": 50, "total_tokens": 75}
CHAT_USAGE_JSON = json.dumps(CHAT_USAGE, separators=(",", ":")).encode()


class ChatStream(PreSerialisedStream):
    START_TEXT = frame(b'data: {' + CHAT_ID + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                       b'"logprobs":null,"finish_reason":null}]}\n\n')
    START_TOOL = frame(b'data: {' + CHAT_ID + b',"choices":[{"index":0,"delta":{"role":"assistant","content":null,'
                       b'"tool_calls":[{"index":0,"id":"call_bench","type":"function","function":'
                       b'{"name":"get_weather","arguments":"' + OPEN_ARGS + b'"}}]},'
                       b'"logprobs":null,"finish_reason":null}]}\n\n')
    TEXT = (b'data: {' + CHAT_ID + b',"choices":[{"index":0,"delta":{"content":"%s"},'
            b'"logprobs":null,"finish_reason":null}]}\n\n')
    ARGS = (b'data: {' + CHAT_ID + b',"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":'
            b'{"arguments":"%s"}}]},"logprobs":null,"finish_reason":null}]}\n\n')
    TAIL = (b'data: {' + CHAT_ID + b',"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"%s"}]}\n\n'
            b'data: {' + CHAT_ID + b',"choices":[],"usage":' + CHAT_USAGE_JSON + b'}\n\n'
            b'data: [DONE]\n\n')

    STOP_REASONS = (b"stop", b"tool_calls")  # (text, tool call)


CHAT_WHOLE = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "bench-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT_200, "refusal": None},
                 "logprobs": None, "finish_reason": "stop"}],
    "usage": CHAT_USAGE}, separators=(",", ":")).encode()


# ---------------------------------------------------------------- Anthropic Messages

MSG_START = sse("message_start", {"type": "message_start", "message": {
    "id": "msg_bench", "type": "message", "role": "assistant", "model": "bench-model", "content": [],
    "stop_reason": None, "stop_sequence": None,
    "usage": {"input_tokens": 25, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}})


class MessagesStream(PreSerialisedStream):
    START_TEXT = frame(MSG_START + sse("content_block_start", {
        "type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        + sse("ping", {"type": "ping"}))
    START_TOOL = frame(MSG_START + sse("content_block_start", {
        "type": "content_block_start", "index": 0,
        "content_block": {"type": "tool_use", "id": "toolu_bench", "name": "get_weather", "input": {}}})
        + sse("content_block_delta", b'{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta",'
              b'"partial_json":"' + OPEN_ARGS + b'"}}'))
    TEXT = sse("content_block_delta", b'{"type":"content_block_delta","index":0,'
               b'"delta":{"type":"text_delta","text":"%s"}}')
    ARGS = sse("content_block_delta", b'{"type":"content_block_delta","index":0,'
               b'"delta":{"type":"input_json_delta","partial_json":"%s"}}')
    TAIL = (sse("content_block_stop", {"type": "content_block_stop", "index": 0})
            + sse("message_delta", b'{"type":"message_delta","delta":{"stop_reason":"%s","stop_sequence":null},'
                  b'"usage":{"output_tokens":50}}')
            + sse("message_stop", {"type": "message_stop"}))

    STOP_REASONS = (b"end_turn", b"tool_use")


MESSAGES_WHOLE = json.dumps({
    "id": "msg_bench", "type": "message", "role": "assistant", "model": "bench-model",
    "content": [{"type": "text", "text": TEXT_200}], "stop_reason": "end_turn", "stop_sequence": None,
    "usage": {"input_tokens": 25, "output_tokens": 50}}, separators=(",", ":")).encode()


# ---------------------------------------------------------------- OpenAI Responses

RESP_ID = "resp_bench"
ITEM_ID = "msg_bench"
CALL_ID = "fc_bench"
RESP_USAGE = {"input_tokens": 25, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 50,
              "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 75}


def resp_object(status: str, output: list, usage: dict | None) -> dict:
    return {"id": RESP_ID, "object": "response", "created_at": 1700000000, "status": status, "error": None,
            "incomplete_details": None, "instructions": None, "max_output_tokens": None, "model": "bench-model",
            "output": output, "parallel_tool_calls": True, "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None}, "store": False, "temperature": 1.0,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": 1.0,
            "truncation": "disabled", "usage": usage, "metadata": {}}


def _resp_json(obj: dict) -> bytes:
    """JSON with a `%d` where the sequence number goes (and `%%` for every literal percent)."""
    raw = json.dumps({**obj, "sequence_number": -1}, separators=(",", ":")).encode().replace(b"%", b"%%")
    return raw.replace(b'"sequence_number":-1', b'"sequence_number":%d')


def _text_item(text: str, status: str) -> dict:
    return {"id": ITEM_ID, "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}] if text else []}


def _call_item(args: str, status: str) -> dict:
    return {"id": CALL_ID, "type": "function_call", "status": status, "arguments": args,
            "call_id": "call_bench", "name": "get_weather"}


class ResponsesStream:
    HEAD = [
        _resp_json({"type": "response.created", "response": resp_object("in_progress", [], None)}),
        _resp_json({"type": "response.in_progress", "response": resp_object("in_progress", [], None)}),
    ]
    NAMES = [b"response.created", b"response.in_progress"]
    TEXT = (b'{"type":"response.output_text.delta","sequence_number":%d,"item_id":"' + ITEM_ID.encode()
            + b'","output_index":0,"content_index":0,"delta":"%s","logprobs":[]}')
    ARGS = (b'{"type":"response.function_call_arguments.delta","sequence_number":%d,"item_id":"'
            + CALL_ID.encode() + b'","output_index":0,"delta":"%s"}')
    START_TEXT = b"".join(sse(n.decode(), h) for n, h in zip(
        [*NAMES, b"response.output_item.added", b"response.content_part.added"],
        [*HEAD, _resp_json({"type": "response.output_item.added", "output_index": 0,
                            "item": _text_item("", "in_progress")}),
         _resp_json({"type": "response.content_part.added", "item_id": ITEM_ID, "output_index": 0,
                     "content_index": 0, "part": {"type": "output_text", "annotations": [], "text": ""}})],
        strict=True))
    START_TOOL = b"".join(sse(n.decode(), h) for n, h in zip(
        [*NAMES, b"response.output_item.added"],
        [*HEAD, _resp_json({"type": "response.output_item.added", "output_index": 0,
                            "item": _call_item("", "in_progress")})], strict=True))

    def __init__(self, tool: bool) -> None:
        self.tool = tool
        self.seq = 0
        self.parts: list[str] = []

    def start(self) -> bytes:
        # The head events carry sequence numbers 0..n-1, substituted in order.
        if self.tool:
            self.seq = 4
            return frame(self.START_TOOL % (0, 1, 2) + sse("response.function_call_arguments.delta",
                                                          self.ARGS % (3, OPEN_ARGS)))
        self.seq = 4
        return frame(self.START_TEXT % (0, 1, 2, 3))

    def delta(self, stamp: bytes) -> bytes:
        self.parts.append(stamp.decode())
        self.seq += 1
        return frame(sse("response.output_text.delta" if not self.tool else "response.function_call_arguments.delta",
                         (self.ARGS if self.tool else self.TEXT) % (self.seq - 1, stamp)))

    def end(self) -> bytes:
        """The closing events repeat the whole text, so they are built once per stream, here."""
        text = "".join(self.parts)
        if self.tool:
            args = '{"a":"' + text + '"}'
            item = _call_item(args, "completed")
            events = [("response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta",
                       "item_id": CALL_ID, "output_index": 0, "delta": '"}'}),
                      ("response.function_call_arguments.done", {"type": "response.function_call_arguments.done",
                       "item_id": CALL_ID, "output_index": 0, "arguments": args})]
        else:
            item = _text_item(text, "completed")
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
            events = [("response.output_text.done", {"type": "response.output_text.done", "item_id": ITEM_ID,
                       "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
                      ("response.content_part.done", {"type": "response.content_part.done", "item_id": ITEM_ID,
                       "output_index": 0, "content_index": 0, "part": part})]
        events += [("response.output_item.done",
                    {"type": "response.output_item.done", "output_index": 0, "item": item}),
                   ("response.completed", {"type": "response.completed",
                                           "response": resp_object("completed", [item], RESP_USAGE)})]
        out = []
        for name, obj in events:
            obj["sequence_number"] = self.seq
            self.seq += 1
            out.append(sse(name, obj))
        return frame(b"".join(out))


RESPONSES_WHOLE = json.dumps(resp_object("completed", [_text_item(TEXT_200, "completed")], RESP_USAGE),
                             separators=(",", ":")).encode()


# ---------------------------------------------------------------- Google Gemini

GEMINI_TAIL_FIELDS = b'"modelVersion":"bench-model","responseId":"bench"'
GEMINI_USAGE = {"promptTokenCount": 25, "candidatesTokenCount": 50, "totalTokenCount": 75}
GEMINI_USAGE_JSON = json.dumps(GEMINI_USAGE, separators=(",", ":")).encode()


def gemini_chunk(parts: bytes, finish: bytes = b"") -> bytes:
    """One SSE event holding a GenerateContentResponse, CRLF-framed as Google sends it."""
    tail = b',"finishReason":"' + finish + b'"' if finish else b""
    usage = b'"usageMetadata":' + GEMINI_USAGE_JSON + b"," if finish else b""
    return (b'data: {"candidates":[{"content":{"parts":[' + parts + b'],"role":"model"}' + tail
            + b',"index":0}],' + usage + GEMINI_TAIL_FIELDS + b"}\r\n\r\n")


class GeminiStream(PreSerialisedStream):
    """No start event (Gemini's first chunk is already content); text deltas; the end is the call, if
    any, in one part, then the finish chunk."""

    TEXT = gemini_chunk(b'{"text":"%s"}')  # no other % in a chunk: the stamp is the only substitution
    CALL = gemini_chunk(b'{"functionCall":{"name":"get_weather","args":{"a":"%s"}}}')
    TAIL = gemini_chunk(b'{"text":""}', b"STOP")

    def delta(self, stamp: bytes) -> bytes:
        return frame(self.TEXT % stamp)

    def end(self) -> bytes:
        if self.tool:
            return frame(self.CALL % (b"t%d " % time.time_ns())) + frame(self.TAIL)
        return frame(self.TAIL)


GEMINI_WHOLE = json.dumps({
    "candidates": [{"content": {"parts": [{"text": TEXT_200}], "role": "model"}, "finishReason": "STOP",
                    "index": 0}],
    "usageMetadata": GEMINI_USAGE, "modelVersion": "bench-model", "responseId": "bench"},
    separators=(",", ":")).encode()


# ---------------------------------------------------------------- HTTP

def whole_response(status: int, body: bytes, reason: bytes = b"OK") -> bytes:
    return (b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (status, reason, len(body))) + body


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")
END = b"0\r\n\r\n"
MODELS = whole_response(200, json.dumps({"object": "list", "data": [
    {"id": m, "object": "model", "created": 1700000000, "owned_by": "bench"}
    for m in ("chat-bench", "claude-bench", "resp-bench")]}).encode())
GEMINI_MODELS = whole_response(200, json.dumps({"models": [{
    "name": "models/gemini-bench", "baseModelId": "gemini-bench", "version": "1", "displayName": "gemini-bench",
    "inputTokenLimit": 1048576, "outputTokenLimit": 65536,
    "supportedGenerationMethods": ["generateContent", "countTokens"]}]}).encode())
NOT_FOUND = whole_response(404, b'{"error":{"message":"not found","type":"not_found"}}', b"Not Found")
BAD = whole_response(400, b'{"error":{"message":"unreadable body","type":"invalid_request_error"}}', b"Bad Request")
# path suffix → (stream class, pre-serialised whole answer)
ENDPOINTS = {
    b"/chat/completions": (ChatStream, whole_response(200, CHAT_WHOLE)),
    b"/messages": (MessagesStream, whole_response(200, MESSAGES_WHOLE)),
    b"/responses": (ResponsesStream, whole_response(200, RESPONSES_WHOLE)),
}
# Gemini names the call in the path (lower-cased here, as the whole head is; the colon may come
# percent-encoded) and streams by it, not by a body field: suffix → streamed?
GEMINI_CALLS = {b":streamgeneratecontent": True, b"%3astreamgeneratecontent": True,
                b":generatecontent": False, b"%3ageneratecontent": False}
GEMINI_WHOLE_RESPONSE = whole_response(200, GEMINI_WHOLE)


def content_length(head: bytes) -> int:
    """The Content-Length of a lower-cased request head (0 without one: `requests` always sends it)."""
    pos = head.find(b"\r\ncontent-length:")
    if pos < 0:
        return 0
    stop = head.find(b"\r\n", pos + 2)
    return int(head[pos + 17:stop if stop > 0 else None])


class Connection(asyncio.Protocol):
    """One keep-alive client connection; requests are answered one at a time, in order."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Each SSE event is its own small write; Nagle would hold it for the previous ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.task is not None:
            self.task.cancel()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.task is None:
            self.next_request()

    def next_request(self) -> None:
        while self.task is None and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).lower()
            length = content_length(head)
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4:end + 4 + length])
            del self.buf[:end + 4 + length]
            method, path = head.split(b" ", 2)[:2]
            self.dispatch(method, path.split(b"?", 1)[0], body)

    def dispatch(self, method: bytes, path: bytes, body: bytes) -> None:
        assert self.transport is not None
        if method == b"get" and path.endswith(b"/models"):
            self.transport.write(GEMINI_MODELS if path.endswith(b"/v1beta/models") else MODELS)
            return
        endpoint: tuple[type, bytes] | None = None
        gemini_stream: bool | None = None
        if method == b"post":
            endpoint = next((v for k, v in ENDPOINTS.items() if path.endswith(k)), None)
            if endpoint is None:
                gemini_stream = next((v for k, v in GEMINI_CALLS.items() if path.endswith(k)), None)
                if gemini_stream is not None:
                    endpoint = (GeminiStream, GEMINI_WHOLE_RESPONSE)
        if endpoint is None:
            self.transport.write(NOT_FOUND)
            return
        try:
            obj = json.loads(body)
            sc = scenario_from(body, obj)
        except ValueError:
            self.transport.write(BAD)
            return
        stream_cls, whole = endpoint
        if not (obj.get("stream") if gemini_stream is None else gemini_stream):
            self.transport.write(whole)
            return
        self.task = asyncio.get_running_loop().create_task(self.stream(stream_cls(sc.tool), sc))
        self.task.add_done_callback(self.stream_done)

    async def stream(self, enc: ChatStream | MessagesStream | ResponsesStream | GeminiStream, sc: Scenario) -> None:
        assert self.transport is not None
        write = self.transport.write
        loop = asyncio.get_running_loop()
        write(STREAM_HEAD + enc.start())
        interval = sc.interval_ms / 1000
        t0 = loop.time()
        for i in range(sc.chunks):
            # Absolute deadlines: a late wake-up does not push back every later chunk.
            wait = t0 + i * interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if self.closed:
                return
            write(enc.delta(b"t%d " % time.time_ns()))
        write(enc.end() + END)

    def stream_done(self, _task: asyncio.Task) -> None:
        self.task = None
        if not self.closed:
            self.next_request()


async def watch_parent(pid: int) -> None:
    """Exit when the orchestrator dies, so no mock outlives a killed benchmark."""
    while True:
        await asyncio.sleep(1)
        if os.getppid() != pid:
            os._exit(0)


def raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(sock: socket.socket, parent_pid: int | None) -> None:
    server = await asyncio.get_running_loop().create_server(Connection, sock=sock, backlog=4096)
    if parent_pid:
        asyncio.get_running_loop().create_task(watch_parent(parent_pid))
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fd", type=int, help="an already listening socket to serve on")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args()
    raise_fd_limit()
    if args.fd is not None:
        sock = socket.socket(fileno=args.fd)
    else:
        sock = socket.create_server(("127.0.0.1", args.port), backlog=4096)
        print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    try:
        import uvloop  # optional: only if installed

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(serve(sock, args.parent_pid))


if __name__ == "__main__":
    main()
