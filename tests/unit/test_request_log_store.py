"""The request log's stores and rules, without a server: both bounds (retention, then size — the
oldest dropped first, and counted) in memory, in the SQLite file and in Redis; what the redactor
replaces (known secrets, JSON paths in JSON bodies and in a stream's `data:` lines, regular
expressions); which requests the hook chooses (key globs, the sample, `errors: always`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.config.request_log import RequestLogConfig, parse_request_log
from proxy.config.state import parse_state
from proxy.config.values import ConfigError
from proxy.ops.records import Arrival, RequestRecord
from proxy.ops.request_capture import RequestCapture
from proxy.ops.request_entry import LoggedRequest, Redactor, safe_query
from proxy.ops.request_log import RequestLog, RequestLogWriter
from proxy.ops.request_log_store import MemoryRequestLog, SQLiteRequestLog, log_path


def entry(n: int, at: float, size: int = 1000) -> LoggedRequest:
    return LoggedRequest(f"req_{n}", at, "team", "m", 200, {"request_id": f"req_{n}", "time": "x"},
                         {"client_request": b"x" * size})


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def stores(tmp_path: Path, retention_s: float, max_bytes: int, clock: Clock) -> list[Any]:
    return [MemoryRequestLog(retention_s, max_bytes, clock),
            SQLiteRequestLog(str(tmp_path / "log.db"), retention_s, max_bytes, clock)]


@pytest.mark.parametrize("kind", [0, 1], ids=["memory", "sqlite"])
def test_the_size_bound_drops_the_oldest_first_and_counts_them(tmp_path: Path, kind: int) -> None:
    store = stores(tmp_path, 3600, 10_000, Clock(1100.0))[kind]
    for n in range(20):
        store.add([entry(n, 1000.0 + n)], now=1100.0)
    kept = store.having([f"req_{n}" for n in range(20)])
    totals = store.totals()
    assert kept == {f"req_{n}" for n in range(20 - len(kept), 20)} and 0 < len(kept) < 20
    assert totals["bytes"] <= 10_000 and totals["dropped"] == 20 - len(kept) and totals["entries"] == len(kept)
    assert store.get("req_19").parts["client_request"] == b"x" * 1000 and store.get("req_0") is None


@pytest.mark.parametrize("kind", [0, 1], ids=["memory", "sqlite"])
def test_entries_past_retention_leave_without_counting_as_drops(tmp_path: Path, kind: int) -> None:
    clock = Clock(1000.0)
    store = stores(tmp_path, 60, 10**9, clock)[kind]
    store.add([entry(1, 1000.0)], now=1000.0)
    clock.now = 1050.0
    store.add([entry(2, 1050.0)], now=1050.0)
    clock.now = 1100.0
    store.add([entry(3, 1100.0)], now=1100.0)  # req_1 is now 100 s old: past the 60 s kept
    assert store.having(["req_1", "req_2", "req_3"]) == {"req_2", "req_3"}
    assert store.totals()["dropped"] == 0 and store.totals()["entries"] == 2  # purged, not only hidden
    assert [e.request_id for e in store.between(0, 2000)] == ["req_2", "req_3"]
    clock.now = 1115.0  # req_2 is past retention too, and no write has come to purge it: not served
    assert store.get("req_2") is None and store.having(["req_2", "req_3"]) == {"req_3"}


def test_the_log_file_sits_beside_the_state_file() -> None:
    assert log_path("/var/lib/llm-proxy/state.db") == "/var/lib/llm-proxy/state.requests.db"
    assert log_path("state") == "state.requests.db"


def test_the_redis_store_bounds_the_log_for_every_host(redis_url: str) -> None:
    from proxy.ops.redis_request_log import RedisRequestLog

    state = parse_state({"backend": "redis", "url": redis_url, "prefix": "unit-reqlog:"}, "state")
    one, other = RedisRequestLog(state, 60, 10_000), RedisRequestLog(state, 60, 10_000)  # two hosts
    for n in range(12):
        (one if n % 2 else other).add([LoggedRequest(f"req_{n}", 1000.0 + n, "team", "m", 200,
                                                     {"request_id": f"req_{n}", "time": "2026-01-01T00:00:00Z"},
                                                     {"client_request": b"y" * 1000})], now=1020.0)
    kept = one.having([f"req_{n}" for n in range(12)])
    totals = other.totals()
    assert kept == {f"req_{n}" for n in range(12 - len(kept), 12)} and 0 < len(kept) < 12
    assert totals["bytes"] <= 10_000 and totals["dropped"] == 12 - len(kept)
    newest = other.get("req_11")
    assert newest is not None and newest.parts["client_request"] == b"y" * 1000
    one.add([], now=1070.0)  # 60 s kept: what arrived before 1010 is past retention
    assert other.having([f"req_{n}" for n in range(12)]) == {"req_10", "req_11"}


def test_the_redactor_removes_secrets_paths_and_patterns() -> None:
    redactor = Redactor(["$.messages[*].content", "$.metadata.user_id", r"card-\d{4}"], ["sk-upstream-secret"])
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "yo"}],
                       "metadata": {"user_id": "u1"}, "note": "sk-upstream-secret card-1234"}).encode()
    doc = json.loads(redactor.body(body))
    assert [m["content"] for m in doc["messages"]] == ["[redacted]", "[redacted]"]
    assert doc["metadata"]["user_id"] == "[redacted]" and doc["note"] == "[redacted] [redacted]"
    stream = b'event: x\ndata: {"messages": [{"content": "secret"}]}\n\ndata: [DONE]\n\n'
    assert redactor.body(stream) == b'event: x\ndata: {"messages": [{"content": "[redacted]"}]}\n\ndata: [DONE]\n\n'
    untouched = b'{"other": 1}'
    assert redactor.body(untouched) == untouched  # byte for byte when nothing matches
    assert redactor.body(b"the key sk-client", [b"sk-client"]) == b"the key [redacted]"
    assert safe_query("alt=sse&key=AIzaSECRET") == "alt=sse&key=[redacted]"


def test_a_redaction_rule_that_cannot_work_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="JSON path"):
        parse_request_log({"redact": ["$.messages[x]"]})
    with pytest.raises(ConfigError, match="regular expression"):
        parse_request_log({"redact": ["(unclosed"]})
    with pytest.raises(ConfigError, match="fraction"):
        parse_request_log({"sample": 1.5})


class Queue(RequestLogWriter):
    def __init__(self) -> None:
        self.captures: list[RequestCapture] = []

    def put(self, capture: RequestCapture) -> None:
        self.captures.append(capture)


def served(hook: RequestLog, key: str, status: int = 200) -> RequestRecord:
    record = RequestRecord("req_x", key, "chat_completions", "m", False)
    hook.request_arrived(record, Arrival("POST", "/v1/chat/completions", "", {}, lambda: b"{}"))
    if record.capture is not None:
        record.finish(status, "ok" if status < 400 else "invalid_request")
        hook.request_done(record)
        record.capture.client_answer(status, {}, b"{}")
    return record


def test_the_hook_chooses_by_key_and_sample_and_keeps_failures() -> None:
    draws = iter([0.9, 0.9, 0.1])
    queue = Queue()
    config = RequestLogConfig(enabled=True, keys=("team-*",), sample=0.5, errors="always")
    hook = RequestLog(lambda: config, queue, chance=lambda: next(draws))
    assert served(hook, "other").capture is None  # not a chosen key: not even watched
    served(hook, "team-a")  # drawn 0.9: outside the sample, and it succeeded: not kept
    served(hook, "team-a", status=400)  # drawn 0.9, failed: kept
    served(hook, "team-b")  # drawn 0.1: in the sample
    assert [c.logged_because for c in queue.captures] == ["error", "sampled"]
    sampled_only = RequestLogConfig(enabled=True, sample=0.0, errors="sampled")
    assert served(RequestLog(lambda: sampled_only, queue, chance=lambda: 0.5), "x", 500).capture is None

