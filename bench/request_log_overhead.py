"""What the request log adds, timed in-process as a gunicorn worker runs it: per streamed chunk
(the tap the streaming engine calls: the upstream's bytes as read, the client's frame as written)
and per request (the arrival, the choice, the capture, the attempt's start and end, the answer —
then, off the request path, the entry made and written to the log's SQLite file in the writer's
batches: 1 when requests end far apart, about 5 at the operating point — 10 streams ending every
second, gathered for `GATHER` = 0.5 s —, 16 under load), for every request kept and for a 10 %
sample with `errors: always` (every request of a chosen key is watched, one in ten written).

    python bench/request_log_overhead.py [--requests 2000] [--chunks 50]

Prints CPU microseconds (this process, every thread: the writer's SQLite work included), medians of
5 runs, beside the issue's targets: ≤ 5 µs per chunk, ≤ 200 µs per request. Off (the default) the
log costs one `is not None` test per chunk and nothing per request: there is no hook to call.
The end-to-end figures, the whole server beside the same server with the log off, are
`python bench/run.py --focus --only op,nonstream --variants reqlog-all,reqlog-10pct`. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.config.request_log import RequestLogConfig
from proxy.ops.records import Arrival, AttemptRecord, AttemptStart, RequestRecord
from proxy.ops.request_capture import RequestCapture
from proxy.ops.request_entry import Redactor, logged_request
from proxy.ops.request_log import RequestLog
from proxy.ops.request_log_store import SQLiteRequestLog

BODY = json.dumps({"model": "claude-sonnet-4-6", "max_tokens": 1024, "stream": True, "system": "You are terse.",
                   "messages": [{"role": "user", "content": "Explain the proxy's request log. " * 8}]}).encode()
UPSTREAM_BODY = BODY.replace(b'"system"', b'"system_prompt"')
UPSTREAM_CHUNK = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
                  b'"choices":[{"index":0,"delta":{"content":"a word or two"},"finish_reason":null}]}\n\n')
CLIENT_FRAME = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                b'"delta":{"type":"text_delta","text":"a word or two"}}\n\n')
HEADERS = {"content-type": "application/json", "x-api-key": "sk-client-0123456789", "anthropic-version": "2023-06-01",
           "user-agent": "claude-cli/2.1 (external, cli)", "accept": "application/json"}
SECRETS = ("sk-up-0123456789", "sk-up-9876543210", "sk-client-0123456789", "sk-admin-0123456789")


def cpu_per(fn: Callable[[], None], n: int) -> float:
    """CPU µs per call of `fn` (this process, all threads), median of 5 runs of n calls."""
    runs = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(n):
            fn()
        runs.append((time.process_time() - started) / n * 1e6)
    return statistics.median(runs)


class Served:
    """One request as the edge, the relay and the engine feed the hook and its capture."""

    def __init__(self, hook: RequestLog, chunks: int, stream: bool) -> None:
        self.hook, self.chunks, self.stream = hook, chunks, stream
        self.n = 0

    def __call__(self) -> None:
        self.n += 1
        record = RequestRecord(f"req_{self.n:08d}", "claude-laptop", "messages", "claude-sonnet-4-6", self.stream)
        self.hook.request_arrived(record, Arrival("POST", "/v1/messages", "", dict(HEADERS), lambda: BODY,
                                                  "sk-client-0123456789"))
        capture = record.capture
        if capture is not None:
            capture.attempt_started(AttemptStart(1, "main", "chat_completions", "https://api.example.com/v1",
                                                 "acct-1", "gpt-5", "/chat/completions", UPSTREAM_BODY))
        if self.stream and capture is not None:
            capture.client_answer(200, {"Content-Type": "text/event-stream"}, None)
            for _ in range(self.chunks):
                capture.upstream_chunk(UPSTREAM_CHUNK)
                capture.client_frames([CLIENT_FRAME])
        record.attempts = 1
        self.hook.attempt(AttemptRecord(record.request_id, "main", "acct-1", 200, "ok", "return", 0.4, record,
                                        None, "gpt-5", 1))
        record.finish(200, "ok")
        self.hook.request_done(record)
        if capture is not None and not self.stream:
            capture.client_answer(200, {"Content-Type": "application/json"}, UPSTREAM_BODY)


class Writer:
    """The writer's work, done where the real one does it (here, inline, in batches)."""

    def __init__(self, store: SQLiteRequestLog, batch: int) -> None:
        self.store, self.batch = store, batch
        self.redactor = Redactor((), SECRETS)
        self.pending: list[RequestCapture] = []

    def put(self, capture: RequestCapture) -> None:
        self.pending.append(capture)
        if len(self.pending) >= self.batch:
            entries = [logged_request(c, self.redactor) for c in self.pending]
            self.pending = []
            self.store.add(entries, time.time())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=50)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="llm-proxy-reqlog-bench-"))

    # Per chunk: the two tap calls of one streamed chunk, on a capture kept well under its cap.
    capture = RequestCapture(Arrival("POST", "/v1/messages", "", {}, lambda: b""), 1 << 30, True, 0.0,
                             lambda c: None)
    capture.attempt_started(AttemptStart(1, "u", "chat_completions", "http://u", "a", "m", "/p", b"{}"))

    def chunk() -> None:
        capture.upstream_chunk(UPSTREAM_CHUNK)
        capture.client_frames([CLIENT_FRAME])

    per_chunk = cpu_per(chunk, 20000)
    print(f"per chunk (both taps)                          {per_chunk:7.2f} µs   target ≤ 5 µs")

    for stream in (True, False):
        shape = f"a {args.chunks}-chunk stream" if stream else "a whole answer"
        for label, sample, batch in (("every request kept, writer batch 1", 1.0, 1),
                                     ("every request kept, writer batch 5", 1.0, 5),
                                     ("every request kept, writer batch 16", 1.0, 16),
                                     ("10 % sampled (errors: always), batch 1", 0.1, 1)):
            store = SQLiteRequestLog(str(tmp / f"log-{stream}-{sample}-{batch}.db"), 72 * 3600, 256 * 2**20)
            writer = Writer(store, batch)
            config = RequestLogConfig(enabled=True, sample=sample)
            draws = iter(i % 10 / 10 + 0.05 for i in range(10**9))  # exactly one in ten under 0.1
            hook = RequestLog(lambda c=config: c, writer, chance=lambda d=draws: next(d))  # type: ignore[arg-type]
            total = cpu_per(Served(hook, args.chunks, stream), args.requests // 5)
            chunks_cost = per_chunk * args.chunks if stream else 0.0
            print(f"{shape:22} {label:40} {total:8.1f} µs a request, of which per request "
                  f"{total - chunks_cost:7.1f} µs   target ≤ 200 µs")


if __name__ == "__main__":
    main()
