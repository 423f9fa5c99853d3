"""`/v1/messages` streams on the wire: every frame `event: <type>` + matching `data`, one frame per
write, `ping` keepalives, and an in-band `event: error` when the upstream goes silent."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer
from tests.wire import RawResponse, request

HEADERS = {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}


def stream(proxy: ProxyServer, content: str, request_id: str | None = None) -> RawResponse:
    body = {"model": "claude-x", "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": content}]}
    return request(proxy.url, "POST", "/v1/messages", body, {**HEADERS, "X-Request-Id": request_id or uuid.uuid4().hex})


def parse(frame: bytes) -> tuple[str, dict[str, Any]]:
    head, data = frame.split(b"\n", 1)
    assert head.startswith(b"event: ") and data.startswith(b"data: ") and data.endswith(b"\n\n"), frame
    name, payload = head[7:].decode(), json.loads(data[6:])
    assert payload["type"] == name
    return name, payload


def test_framing_headers_and_order(proxy: ProxyServer) -> None:
    resp = stream(proxy, "Hi [demo:pace=0]")
    assert resp.status == 200 and resp.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert resp.headers["request-id"] == resp.headers["x-request-id"]
    names = [parse(chunk)[0] for chunk in resp.rest()]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert b"[DONE]" not in b"".join(resp.chunks)
    resp.close()


def test_first_event_while_upstream_is_still_sending(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    rid = uuid.uuid4().hex
    resp = stream(proxy, "[demo:hold]", request_id=rid)
    first = resp.next_chunk()
    assert first is not None and parse(first)[0] == "message_start"
    demo_upstream.control(f"/_demo/release?request_id={rid}")
    assert parse(resp.rest()[-1])[0] == "message_stop"
    resp.close()


def test_ping_keepalives_then_normal_end(fast_proxy: ProxyServer) -> None:
    names = [parse(c)[0] for c in stream(fast_proxy, "[demo:pause=1.0] [demo:pace=0]").rest()]
    assert names.count("ping") >= 3  # one after message_start, then keepalives every 0.2 s
    assert names[-1] == "message_stop"


def test_idle_deadline_is_an_error_event(fast_proxy: ProxyServer) -> None:
    frames = [parse(c) for c in stream(fast_proxy, "[demo:hold]").rest()]
    name, payload = frames[-1]
    assert name == "error" and payload["error"] == {"type": "timeout_error",
                                                     "message": "upstream sent nothing for 1.5s"}
    names = [n for n, _ in frames]
    assert names.count("content_block_start") == names.count("content_block_stop")  # no block left open
