"""What tracing adds to each request, timed in-process as a gunicorn worker runs it: the SERVER
span started when the request arrives (the client's `traceparent` extracted), a CLIENT span per
attempt with its `traceparent` for the upstream, the attributes and the first-chunk event when the
request ends — and the export of every span, batched by the SDK to a collector on loopback (a
thread of this process that takes each batch and drops it), so the protobuf encoding and the HTTP
posts are counted too. Streamed chunks make no tracing call at all: there is nothing per chunk
to time.

    python bench/tracing_overhead.py [--requests 4000]

Prints CPU microseconds per request (this process, every thread: the exporter's included), one
attempt and two (a retry), medians of 5 runs, beside the issue's target (≤ 150 µs a request).
The end-to-end figure, the whole server beside the same server with tracing off, is
`python bench/run.py --focus --only op,nonstream --variants tracing`. Not part of CI.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "200")  # batches as a busy worker sends them

from run import otlp_sink  # bench/run.py's collector that drops what it gets

from proxy.config.tracing import TracingConfig
from proxy.ir.request import Message, Request, TextPart
from proxy.ir.response import Usage
from proxy.ops.records import Arrival, AttemptRecord, AttemptStart, RequestRecord
from proxy.ops.tracing import Tracing, flush_all

HEADERS = {"content-type": "application/json", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
           "user-agent": "claude-cli/2.1 (external, cli)"}
REQUEST = Request(model="claude-sonnet-4-6", messages=[Message("user", [TextPart("Explain tracing.")])],
                  max_tokens=1024, temperature=0.2, top_p=0.9)


def one(hook: Tracing, n: int, attempts: int) -> None:
    record = RequestRecord(f"req_{n:08d}", "claude-laptop", "messages", "claude-sonnet-4-6", True)
    hook.request_arrived(record, Arrival("POST", "/v1/messages", "", HEADERS, lambda: b""))
    record.decoded = lambda: REQUEST
    trace = record.trace
    assert trace is not None
    for number in range(1, attempts + 1):
        trace.attempt_started(AttemptStart(number, "main", "chat_completions", "https://api.example.com/v1",
                                           f"acct-{number}", "gpt-5", "/chat/completions", b"{}"))
        last = number == attempts
        record.attempts = number
        hook.attempt(AttemptRecord(record.request_id, "main", f"acct-{number}", 200 if last else 429,
                                   "ok" if last else "rate_limited", "stream" if last else "cool", 0.3, record,
                                   None, "gpt-5", number))
    record.first_byte()
    record.response_id, record.response_model, record.finish_reason = "chatcmpl-1", "gpt-5-2025", "stop"
    record.finish(200, "ok", Usage(input_tokens=1200, output_tokens=300, cache_read_tokens=1000))
    hook.request_done(record)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=4000)
    args = parser.parse_args()
    hook = Tracing(TracingConfig(enabled=True, endpoint=otlp_sink()),
                   lambda name: {"messages": "anthropic"}.get(name, "openai"))
    for attempts in (1, 2):
        runs = []
        for _run in range(5):
            started = time.process_time()
            for n in range(args.requests):
                one(hook, n, attempts)
            runs.append((time.process_time() - started) / args.requests * 1e6)
        print(f"{attempts} attempt(s): {statistics.median(runs):7.1f} µs CPU a request (spans made and exported; "
              f"runs {min(runs):.1f} to {max(runs):.1f})   target ≤ 150 µs")
    flush_all()


if __name__ == "__main__":
    main()
