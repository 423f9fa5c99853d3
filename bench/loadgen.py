"""Load generator for the benchmarks: C concurrent keep-alive connections sending LLM requests of
one client protocol, timing every byte. Runs in its own process; prints a JSON summary.

    python bench/loadgen.py --url http://127.0.0.1:8080 --protocol chat|messages|responses|gemini \
        [--no-stream] --concurrency C (--requests-per-conn N | --duration S) \
        [--chunks 50 --interval-ms 20 --tool] [--model M] [--ramp-s S] [--stall-s 2] [--late-ms MS] \
        [--timeout S] [--out F] [--raw F]

Owns the client side of a benchmark run: a tiny HTTP/1.1 client on asyncio protocols (no HTTP
library, so the generator costs little next to what it measures) with chunked decoding and SSE
event splitting. For every request it records the start, the arrival of the first byte of the
first event (TTFT), the arrival of every read, the status, and for every streamed text delta (or
tool-argument fragment) the delivery delay: arrival time minus the `t<ns>` send timestamp the mock
upstream embedded in it. It flags errors (non-200, in-band error events, a stream without its
protocol's terminator, fewer deltas than asked for, unparsable JSON, timeouts, dropped
connections) and stalls (no byte for longer than --stall-s); with --late-ms, it also counts the
deltas delivered later than that (and the requests with one), and says when the first and the last
of them arrived, in seconds from the first request's start (in the connect ramp, or after it).

The scenario goes in the prompt as `[bench:chunks=N,interval=MS,tool=0|1]`, which the mock reads
whatever protocol the proxy translated the request into.

Gemini (`--protocol gemini`) names the model and the call in the path —
`/v1beta/models/{model}:streamGenerateContent?alt=sse`, or `:generateContent` with --no-stream — and
takes the key as `x-goog-api-key`. Its SSE events are `data: {GenerateContentResponse}` framed with
CRLF (LF is read too), a blank line between events is a keepalive, and there is no [DONE]: a stream
is complete when its body ends (the last chunk of the chunked encoding) after an event with a
`finishReason`. A delta is any `data:` event (its stamps count: a text part, or a whole
`functionCall` — which carries every argument fragment's stamp at once, as Gemini sends calls
whole); an error is a `data: {"error": …}` event or the bare `{"error": …}` object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import resource
import socket
import sys
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses",
         "gemini": "/v1beta/models/{model}:{call}"}
GEMINI_CALLS = {True: "streamGenerateContent?alt=sse", False: "generateContent"}  # by whether it streams
STAMP = re.compile(rb"t(\d{19}) ")
EVENT_END_CRLF = re.compile(rb"\r?\n\r?\n")  # Gemini's events end in CRLF CRLF
TOOL = {"name": "get_weather", "description": "Weather for a city.",
        "schema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}


# ---------------------------------------------------------------- requests

def request_body(protocol: str, model: str, stream: bool, chunks: int, interval_ms: float, tool: bool) -> dict:
    prompt = f"Benchmark request. [bench:chunks={chunks},interval={interval_ms:g},tool={int(tool)}]"
    if protocol == "chat":
        body: dict[str, Any] = {"model": model, "stream": stream, "messages": [{"role": "user", "content": prompt}]}
        if tool:
            body["tools"] = [{"type": "function", "function": {
                "name": TOOL["name"], "description": TOOL["description"], "parameters": TOOL["schema"]}}]
    elif protocol == "messages":
        body = {"model": model, "max_tokens": 1024, "stream": stream,
                "messages": [{"role": "user", "content": prompt}]}
        if tool:
            body["tools"] = [{"name": TOOL["name"], "description": TOOL["description"],
                              "input_schema": TOOL["schema"]}]
    elif protocol == "gemini":  # the model and whether to stream are in the path (request_path)
        body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}],
                "generationConfig": {"maxOutputTokens": 1024}}
        if tool:
            body["tools"] = [{"functionDeclarations": [{"name": TOOL["name"], "description": TOOL["description"],
                                                        "parametersJsonSchema": TOOL["schema"]}]}]
    else:
        body = {"model": model, "stream": stream, "input": prompt}
        if tool:
            body["tools"] = [{"type": "function", "name": TOOL["name"], "description": TOOL["description"],
                              "parameters": TOOL["schema"]}]
    return body


def request_path(protocol: str, model: str, stream: bool) -> str:
    return PATHS[protocol].format(model=model, call=GEMINI_CALLS[stream])


def request_bytes(host: str, protocol: str, key: str, body: dict, path: str) -> bytes:
    raw = json.dumps(body).encode()
    auth = f"x-goog-api-key: {key}" if protocol == "gemini" else f"Authorization: Bearer {key}"
    extra = "anthropic-version: 2023-06-01\r\n" if protocol == "messages" else ""
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n{extra}"
            f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n")
    return head.encode() + raw


# ---------------------------------------------------------------- SSE judging per protocol

def is_delta(protocol: str, event: bytes) -> bool:
    """Events that carry model output (and so a timestamp) — not the closing summaries, which
    repeat the whole text."""
    if protocol in ("chat", "gemini"):
        return event.startswith(b"data: {") or event.startswith(b"data:{")
    if protocol == "messages":
        return event.startswith(b"event: content_block_delta")
    return event.startswith(b"event: response.") and event.split(b"\n", 1)[0].endswith(b".delta")


def is_terminator(protocol: str, event: bytes) -> bool:
    if protocol == "chat":
        return event.startswith(b"data: [DONE]") or event.startswith(b"data:[DONE]")
    if protocol == "messages":
        return event.startswith(b"event: message_stop")
    if protocol == "gemini":  # no terminator event: the body's end after the finish reason (Client.finish)
        return b'"finishReason"' in event
    return event.startswith(b"event: response.completed")


def in_band_error(protocol: str, event: bytes) -> bool:
    if protocol == "chat":
        return event.startswith(b'data: {"error"')
    if protocol == "messages":
        return event.startswith(b"event: error")
    if protocol == "gemini":  # an error event, or the bare error object the proxy writes mid-stream
        return event.startswith((b'data: {"error"', b'data:{"error"', b'{"error"'))
    return event.startswith((b"event: error", b"event: response.failed", b"event: response.incomplete"))


# ---------------------------------------------------------------- one request on the wire

class Record:
    """Everything measured about one request (times are time.time_ns())."""

    __slots__ = ("delays", "deltas", "end", "error", "first", "late", "late_first", "late_last", "max_gap", "reads",
                 "start", "status")

    def __init__(self, start: int) -> None:
        self.start = start
        self.first: int | None = None
        self.end: int | None = None
        self.status = 0
        self.error: str | None = None
        self.reads: list[int] = []
        self.delays: list[int] = []
        self.deltas = 0
        self.max_gap = 0
        self.late = 0  # deltas delivered later than --late-ms, and when the first and last of them arrived
        self.late_first: int | None = None
        self.late_last: int | None = None

    def fail(self, error: str) -> None:
        if self.error is None:  # the first problem is the one worth reporting
            self.error = error

    def raw(self) -> dict[str, Any]:
        def us(t: int | None) -> int | None:
            return None if t is None else (t - self.start) // 1000

        return {"start_ns": self.start, "first_us": us(self.first), "end_us": us(self.end), "status": self.status,
                "error": self.error, "deltas": self.deltas, "max_gap_us": self.max_gap // 1000,
                "reads_us": [us(t) for t in self.reads]}


class Client(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time as bytes arrive."""

    def __init__(self, protocol: str, stream: bool, expect_deltas: int, late_ns: int = 0) -> None:
        self.protocol = protocol
        self.late_ns = late_ns  # 0: lateness not judged
        self.stream = stream
        self.expect_deltas = expect_deltas
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.rec: Record | None = None
        self.done: asyncio.Future[None] | None = None

    # -- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.rec is not None:
            self.rec.fail("connection closed before the response ended")
            self.finish(time.time_ns())

    def data_received(self, data: bytes) -> None:
        now = time.time_ns()
        rec = self.rec
        if rec is None:
            return  # nothing asked: a server's stray bytes are ignored
        rec.reads.append(now)
        gap = now - self.last
        if gap > rec.max_gap:
            rec.max_gap = gap
        self.last = now
        self.buf += data
        self.parse(now)

    # -- driving
    def begin(self, rec: Record, payload: bytes) -> asyncio.Future[None]:
        assert self.transport is not None
        self.rec = rec
        self.last = rec.start
        self.buf = bytearray()
        self.sse = bytearray()
        self.state = "head"
        self.length = 0
        self.close_after = False
        self.saw_end = False
        self.body = bytearray()
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(payload)
        return self.done

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # -- parsing
    def parse(self, now: int) -> None:
        if self.state == "head":
            self.parse_head()
        if self.state == "chunked":
            self.parse_chunks(now)
        elif self.state == "length":
            take = min(self.length, len(self.buf))
            if take:
                self.payload(bytes(self.buf[:take]), now)
                del self.buf[:take]
                self.length -= take
            if self.length == 0:
                self.finish(now)

    def parse_head(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        assert self.rec is not None
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        del self.buf[:end + 4]
        self.rec.status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        self.close_after = headers.get("connection", "").lower() == "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.state = "chunked"
        else:
            self.state = "length"
            self.length = int(headers.get("content-length", "0"))

    def parse_chunks(self, now: int) -> None:
        buf = self.buf
        while self.rec is not None:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                return
            try:
                size = int(bytes(buf[:line_end]).split(b";", 1)[0], 16)
            except ValueError:
                self.rec.fail("broken chunked framing")
                self.close()
                self.finish(now)
                return
            if size == 0:
                if buf.find(b"\r\n\r\n", line_end) < 0:  # the last chunk, then (no) trailers
                    return
                del buf[:]
                self.finish(now)
                return
            if len(buf) < line_end + 2 + size + 2:
                return
            self.payload(bytes(buf[line_end + 2:line_end + 2 + size]), now)
            del buf[:line_end + 2 + size + 2]

    def payload(self, data: bytes, now: int) -> None:
        rec = self.rec
        assert rec is not None
        if rec.first is None and data:
            rec.first = now
        if not self.stream:
            self.body += data
            return
        self.sse += data
        start = 0
        if self.protocol == "gemini":
            for m in EVENT_END_CRLF.finditer(self.sse):
                self.event(bytes(self.sse[start:m.start()]).lstrip(b"\r\n"), now)
                start = m.end()
        else:
            while True:
                end = self.sse.find(b"\n\n", start)
                if end < 0:
                    break
                self.event(bytes(self.sse[start:end]).lstrip(b"\r\n"), now)
                start = end + 2
        if start:
            del self.sse[:start]

    def event(self, ev: bytes, now: int) -> None:
        rec = self.rec
        assert rec is not None
        protocol = self.protocol
        if is_delta(protocol, ev):
            for stamp in STAMP.findall(ev):
                delay = now - int(stamp)
                rec.delays.append(delay)
                rec.deltas += 1
                if self.late_ns and delay > self.late_ns:
                    rec.late += 1
                    rec.late_last = now
                    if rec.late_first is None:
                        rec.late_first = now
        if in_band_error(protocol, ev):
            rec.fail("in-band error: " + ev[:160].decode("utf-8", "replace"))
        elif is_terminator(protocol, ev):
            self.saw_end = True

    def finish(self, now: int) -> None:
        rec = self.rec
        if rec is None:
            return
        self.rec = None
        rec.end = now
        if rec.status != 200:
            rec.fail(f"HTTP {rec.status}: " + bytes(self.body[:160] or self.sse[:160]).decode("utf-8", "replace"))
        elif self.stream:
            if not self.saw_end:
                rec.fail("stream ended without its terminator")
            elif rec.deltas < self.expect_deltas:
                rec.fail(f"only {rec.deltas} of {self.expect_deltas} deltas arrived")
        else:
            try:
                obj = json.loads(self.body)
                if not isinstance(obj, dict) or obj.get("error"):
                    rec.fail("error body")
            except ValueError:
                rec.fail("unparsable JSON body")
        if self.close_after:
            self.close()
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


# ---------------------------------------------------------------- the run

class Job:
    def __init__(self, args: argparse.Namespace) -> None:
        parts = urlsplit(args.url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.protocol = args.protocol
        self.stream = args.stream
        self.expect = args.chunks if args.stream else 0
        model = args.model or default_model(args.protocol)
        body = request_body(args.protocol, model, args.stream, args.chunks, args.interval_ms, args.tool)
        self.payload = request_bytes(f"{self.host}:{self.port}", args.protocol, args.key, body,
                                     request_path(args.protocol, model, args.stream))
        self.timeout = args.timeout or (30 + args.chunks * args.interval_ms / 1000 * 2)
        self.late_ns = int((args.late_ms or 0) * 1e6)
        self.records: list[Record] = []
        self.connect_errors = 0


def default_model(protocol: str) -> str:
    return {"chat": "chat-bench", "messages": "claude-bench", "responses": "resp-bench",
            "gemini": "gemini-bench"}[protocol]


async def connect(job: Job) -> Client | None:
    loop = asyncio.get_running_loop()
    try:
        _, client = await loop.create_connection(lambda: Client(job.protocol, job.stream, job.expect, job.late_ns),
                                                 job.host, job.port)
        return client
    except OSError:
        job.connect_errors += 1
        return None


async def one_connection(job: Job, requests: int, deadline: float | None, delay: float) -> None:
    """Send requests back to back on one kept-alive connection, reconnecting if it closes."""
    loop = asyncio.get_running_loop()
    client: Client | None = None
    if delay:
        await asyncio.sleep(delay)
    sent = 0
    while (deadline is None and sent < requests) or (deadline is not None and loop.time() < deadline):
        sent += 1
        if client is None or client.closed:
            client = await connect(job)
            if client is None:
                rec = Record(time.time_ns())
                rec.fail("connect failed")
                rec.end = rec.start
                job.records.append(rec)
                await asyncio.sleep(0.05)
                continue
        rec = Record(time.time_ns())
        job.records.append(rec)
        try:
            await asyncio.wait_for(asyncio.shield(client.begin(rec, job.payload)), job.timeout)
        except TimeoutError:
            rec.fail(f"no complete response within {job.timeout:g}s")
            rec.end = time.time_ns()
            rec.max_gap = max(rec.max_gap, rec.end - (rec.reads[-1] if rec.reads else rec.start))
            client.rec = None
            client.close()
            client = None
    if client is not None:
        client.close()


async def run(job: Job, concurrency: int, requests: int, duration: float | None, ramp: float) -> float:
    """Connection i starts i/C of the way through the ramp: C streams that all start in the same
    millisecond (and, being equally long, stay in step) would measure a thundering herd rather
    than C open streams."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + duration if duration else None
    await asyncio.gather(*(one_connection(job, requests, deadline, ramp * i / concurrency)
                           for i in range(concurrency)))
    return loop.time() - started


# ---------------------------------------------------------------- summary

def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    v = sorted(values)

    def at(q: float) -> float:
        return round(v[min(len(v) - 1, int(q * len(v)))], 3)

    return {"n": len(v), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": round(v[-1], 3),
            "mean": round(sum(v) / len(v), 3)}


def summarise(job: Job, args: argparse.Namespace, elapsed: float) -> dict[str, Any]:
    recs = job.records
    stall_ns = int(args.stall_s * 1e9)
    errors = [r for r in recs if r.error]
    kinds = Counter(re.sub(r"\d+ of \d+", "N of M", (r.error or "").split(":", 1)[0]) for r in errors)
    ends = [r.end for r in recs if r.end]
    span = (max(ends) - min(r.start for r in recs)) / 1e9 if ends else elapsed
    ok = len(recs) - len(errors)
    t0 = min((r.start for r in recs), default=0)
    late_firsts = [r.late_first for r in recs if r.late_first is not None]
    late_lasts = [r.late_last for r in recs if r.late_last is not None]
    return {
        "url": args.url, "protocol": args.protocol, "stream": args.stream, "concurrency": args.concurrency,
        "chunks": args.chunks if args.stream else 0, "interval_ms": args.interval_ms, "tool": args.tool,
        "requests": len(recs), "ok": ok, "errors": len(errors), "error_kinds": dict(kinds),
        "error_samples": sorted({r.error or "" for r in errors})[:5],
        "stalls": sum(1 for r in recs if r.max_gap > stall_ns), "stall_s": args.stall_s, "ramp_s": args.ramp_s,
        "connect_errors": job.connect_errors, "elapsed_s": round(elapsed, 3),
        "rps": round(ok / span, 1) if span > 0 else None,
        "ttft_ms": percentiles([(r.first - r.start) / 1e6 for r in recs if r.first and not r.error]),
        "latency_ms": percentiles([(r.end - r.start) / 1e6 for r in recs if r.end and not r.error]),
        "delay_ms": percentiles([d / 1e6 for r in recs for d in r.delays]),
        "deltas": sum(r.deltas for r in recs), "expected_deltas": len(recs) * (args.chunks if args.stream else 0),
        "reads": sum(len(r.reads) for r in recs),
        **({"late_ms": args.late_ms, "late": sum(r.late for r in recs), "late_requests": sum(1 for r in recs if r.late),
            "late_at_s": [round((min(late_firsts) - t0) / 1e9, 3), round((max(late_lasts) - t0) / 1e9, 3)]
            if late_firsts else None} if args.late_ms else {}),
    }


def raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="target root URL (no /v1)")
    parser.add_argument("--protocol", choices=sorted(PATHS), required=True)
    parser.add_argument("--model")
    parser.add_argument("--key", default="sk-bench-client")
    parser.add_argument("--no-stream", dest="stream", action="store_false")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests-per-conn", type=int, default=1)
    parser.add_argument("--duration", type=float, help="seconds; overrides --requests-per-conn")
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--interval-ms", type=float, default=20)
    parser.add_argument("--tool", action="store_true")
    parser.add_argument("--ramp-s", type=float, default=0.0,
                        help="spread the connections' first requests evenly over this many seconds")
    parser.add_argument("--stall-s", type=float, default=2.0, help="a gap longer than this counts as a stall")
    parser.add_argument("--late-ms", type=float, help="count the deltas delivered later than this (delay as above)")
    parser.add_argument("--timeout", type=float, help="per request (default: 30 s + twice the stream's length)")
    parser.add_argument("--out", help="write the summary here instead of stdout")
    parser.add_argument("--raw", help="also write every request's record here")
    args = parser.parse_args()
    raise_fd_limit()
    job = Job(args)
    elapsed = asyncio.run(run(job, args.concurrency, args.requests_per_conn, args.duration, args.ramp_s))
    summary = json.dumps(summarise(job, args, elapsed))
    if args.out:
        with open(args.out, "w") as f:
            f.write(summary)
    else:
        print(summary)
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump([r.raw() for r in job.records], f)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
