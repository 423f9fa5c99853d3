"""Every error is JSON in the OpenAI envelope with a message that says what to fix — never HTML,
never a traceback, never an upstream key — plus auth, CORS and request ids on every response."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import (
    CLIENT_KEY,
    UPSTREAM_KEYS,
    DemoUpstream,
    ProxyServer,
    base_config,
    listening_socket,
    start_proxy,
    stop_proxy,
)
from tests.wire import request

AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}
CHAT = "/v1/chat/completions"
HELLO = {"model": "demo-model", "messages": [{"role": "user", "content": "hi [demo:pace=0]"}]}


def error_of(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status == status, (resp.status, resp.body())
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    resp.close()
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert set(err) == {"message", "type", "param", "code"}
    text = json.dumps(body)
    assert "Traceback" not in text and "<html" not in text.lower()
    for key in UPSTREAM_KEYS:
        assert key not in text
    return err


@pytest.mark.parametrize(("raw", "headers", "expected"), [
    (b"{not json", {"Content-Type": "application/json"}, "not valid JSON: Expecting property name"),
    (b'{"model": "cut', {"Content-Type": "application/json"},
     "not valid JSON: Unterminated string starting at: line 1 column 11."),
    (b"[1, 2]", {"Content-Type": "application/json"}, "must be a JSON object"),
    (b"", {"Content-Type": "application/json"}, "body is empty"),
    (b"\xff\xfe{}", {"Content-Type": "application/json"}, "not valid UTF-8"),
    (b'{"model": "m"}', {}, "Missing Content-Type"),
    (b'{"model": "m"}', {"Content-Type": "text/plain"}, "Content-Type is 'text/plain'"),
    (b"[" * 100000 + b"]" * 100000, {"Content-Type": "application/json"}, "nests JSON too deeply"),
])
def test_unreadable_bodies_are_400_saying_why(proxy: ProxyServer, raw: bytes, headers: dict[str, str],
                                              expected: str) -> None:
    err = error_of(request(proxy.url, "POST", CHAT, raw, {**AUTH, **headers}), 400)
    assert expected in err["message"]
    assert err["type"] == "invalid_request_error"


@pytest.mark.parametrize(("body", "expected"), [
    ({"messages": []}, "model: is required"),
    ({"model": 5, "messages": []}, "model: must be a string, not a number"),
    ({"model": "m"}, "messages: is required"),
    ({"model": "m", "messages": {}}, "messages: must be an array, not an object"),
    ({"model": "m", "messages": []}, "messages: must contain at least one message"),
    ({"model": "m", "messages": ["hi"]}, "messages[0]: must be an object, not a string"),
    ({"model": "m", "messages": [{"content": "x"}]}, "messages[0].role: is required"),
    ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role: must be one of"),
    ({"model": "m", "messages": [{"role": "user", "content": 7}]}, "messages[0].content: must be a string or an array"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream: must be a boolean"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}, "max_tokens: must be an integer"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [1]}, "tools[0]: must be an object"),
])
def test_wrong_fields_are_400_naming_the_field(proxy: ProxyServer, body: dict[str, Any], expected: str) -> None:
    err = error_of(request(proxy.url, "POST", CHAT, body, AUTH), 400)
    assert expected in err["message"]


def test_auth_missing_wrong_and_both_header_styles(proxy: ProxyServer) -> None:
    err = error_of(request(proxy.url, "POST", CHAT, HELLO), 401)
    assert "Missing API key" in err["message"] and err["code"] == "invalid_api_key"
    err = error_of(request(proxy.url, "POST", CHAT, HELLO, {"Authorization": "Bearer sk-wrong"}), 401)
    assert "Invalid API key" in err["message"]
    err = error_of(request(proxy.url, "POST", CHAT, HELLO, {"Authorization": f"Bearer {UPSTREAM_KEYS[0]}"}), 401)
    for headers in ({"x-api-key": CLIENT_KEY}, AUTH):
        ok = request(proxy.url, "POST", CHAT, HELLO, headers)
        assert ok.status == 200 and ok.json()["choices"][0]["message"]["content"]
        ok.close()
    models = request(proxy.url, "GET", "/v1/models", headers={"x-api-key": CLIENT_KEY})
    assert models.status == 200
    models.close()


def test_unknown_path_and_wrong_method(proxy: ProxyServer) -> None:
    err = error_of(request(proxy.url, "POST", "/v1/nope", HELLO, AUTH), 404)
    assert "Unknown path POST /v1/nope" in err["message"] and "/v1/chat/completions" in err["message"]
    err = error_of(request(proxy.url, "GET", CHAT, headers=AUTH), 405)
    assert "Method GET is not allowed on /v1/chat/completions; use POST" in err["message"]


def test_body_over_the_limit_is_413_before_it_is_sent(fast_proxy: ProxyServer) -> None:
    # max_body_bytes is 4096: announce 10 MB and send none of it; the answer must not wait for it.
    resp = request(fast_proxy.url, "POST", CHAT, None,
                   {**AUTH, "Content-Type": "application/json", "Content-Length": str(10 << 20)}, timeout=5)
    err = error_of(resp, 413)
    assert "4096 bytes" in err["message"] and "max_body_bytes" in err["message"]


ENDPOINT_BODIES = {
    CHAT: {"model": "demo-model", "messages": [{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}]},
    "/v1/messages": {"model": "demo-model", "max_tokens": 20,
                     "messages": [{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}]},
    "/v1/responses": {"model": "demo-model", "input": "hi [demo:words=2] [demo:pace=0]", "store": False},
}


def chunked_post(server: ProxyServer, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST `body` with Transfer-Encoding: chunked (no length announced), in 1000-byte chunks."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 1000]), body[i:i + 1000]) for i in range(0, len(body), 1000))
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {CLIENT_KEY}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock, sock.makefile("rb") as reader:
        sock.sendall(head + chunks + b"0\r\n\r\n")
        status = int(reader.readline().split()[1])
        headers = {}
        while (line := reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        assert headers["content-type"] == "application/json"
        answer: dict[str, Any] = json.loads(reader.read(int(headers["content-length"])))
    return status, answer


@pytest.mark.parametrize("path", list(ENDPOINT_BODIES))
def test_a_chunked_body_over_the_limit_is_413_like_an_announced_one(fast_proxy: ProxyServer, path: str) -> None:
    # max_body_bytes is 4096: a chunked body announces no length, so it is counted as it arrives.
    # JSON allows trailing whitespace, so the same request fits exactly, or is one byte over.
    body = json.dumps(ENDPOINT_BODIES[path]).encode()
    status, answer = chunked_post(fast_proxy, path, body.ljust(4096))
    assert status == 200, answer
    status, answer = chunked_post(fast_proxy, path, body.ljust(4097))
    assert status == 413, answer
    message = "Request body is larger than this proxy accepts (4096 bytes; the limit is the config key max_body_bytes)."
    if path == "/v1/messages":
        assert answer == {"type": "error", "error": {"type": "request_too_large", "message": message}}
    else:
        assert answer == {"error": {"message": message, "type": "invalid_request_error", "param": None,
                                    "code": "request_too_large"}}
    # Cut off at the limit, a long prompt used to read as a JSON string that never ends: a 400.
    long_prompt = json.dumps(ENDPOINT_BODIES[path]).replace("hi [demo", "hi " + "x" * 100_000 + " [demo").encode()
    status, answer = chunked_post(fast_proxy, path, long_prompt)
    assert status == 413, answer


def test_cors_preflight_and_headers(proxy: ProxyServer) -> None:
    pre = request(proxy.url, "OPTIONS", CHAT, headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization, x-stainless-os"})
    assert pre.status == 200 and pre.body() == b""
    assert pre.headers["access-control-allow-origin"] == "*"
    assert pre.headers["access-control-allow-methods"] == "GET, POST, PUT, DELETE, OPTIONS"
    assert "x-stainless-os" in pre.headers["access-control-allow-headers"]
    pre.close()
    plain = request(proxy.url, "OPTIONS", "/v1/models")
    assert plain.status == 200
    assert "X-API-Key" in plain.headers["access-control-allow-headers"]
    plain.close()
    # Every header line as sent (a dict would hide a second copy of one).
    answered = http.client.HTTPConnection(urlsplit(proxy.url).netloc, timeout=20)
    answered.request("POST", CHAT, json.dumps(HELLO), {**AUTH, "Content-Type": "application/json"})
    resp = answered.getresponse()
    assert resp.status == 200, resp.read()
    cors = [(name.lower(), value) for name, value in resp.getheaders() if name.lower().startswith("access-control-")]
    assert sorted(cors) == [("access-control-allow-methods", "GET, POST, PUT, DELETE, OPTIONS"),
                            ("access-control-allow-origin", "*"),
                            ("access-control-expose-headers", "x-request-id, request-id"),
                            ("access-control-max-age", "86400")]  # each once
    answered.close()


def test_request_ids_kept_generated_and_sanitised(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    kept = request(proxy.url, "POST", CHAT, HELLO, {**AUTH, "X-Request-Id": "my-id.123"})
    assert kept.headers["x-request-id"] == "my-id.123"
    kept.close()
    assert demo_upstream.requests("my-id.123")[0]["headers"]["x-request-id"] == "my-id.123"
    for given in ({}, {"X-Request-Id": "bad id\twith spaces"}):
        resp = request(proxy.url, "POST", CHAT, HELLO, {**AUTH, **given})
        assert resp.headers["x-request-id"].startswith("req_") and len(resp.headers["x-request-id"]) == 36
        resp.close()
    err = request(proxy.url, "POST", "/v1/nope", HELLO, AUTH)
    assert err.headers["x-request-id"].startswith("req_")
    err.close()


# ---------------------------------------------------------------- broken upstreams


@pytest.fixture(scope="module")
def broken_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
    refused_port = closed.getsockname()[1]
    silent = listening_socket()  # listening but never accepting: the upstream never answers
    config = base_config("http://127.0.0.1:1/v1", timeouts={"connect": 2, "read": 0.5})
    config["upstreams"] = [
        {"name": "refusing", "protocol": "chat_completions", "base_url": f"http://127.0.0.1:{refused_port}/v1",
         "accounts": [{"id": "r1", "api_key": UPSTREAM_KEYS[0]}], "models": {"serve": ["refused-*"]}},
        {"name": "silent", "protocol": "chat_completions", "base_url": f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
         "accounts": [{"id": "s1", "api_key": UPSTREAM_KEYS[1]}], "models": {"serve": ["silent-*"]}},
    ]
    server = start_proxy(config, Path(tmp_path_factory.mktemp("broken")))
    yield server
    stop_proxy(server)
    closed.close()
    silent.close()


@pytest.mark.parametrize("stream", [False, True])
def test_unreachable_upstream_is_502(broken_proxy: ProxyServer, stream: bool) -> None:
    body = {"model": "refused-x", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    err = error_of(request(broken_proxy.url, "POST", CHAT, body, AUTH), 502)
    assert err["message"] == "upstream 'refusing' refused the connection"


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_without_an_answer_is_504(broken_proxy: ProxyServer, stream: bool) -> None:
    body = {"model": "silent-x", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    started = time.monotonic()
    err = error_of(request(broken_proxy.url, "POST", CHAT, body, AUTH), 504)
    assert err["message"] == "upstream 'silent' sent no response within 0.5s"
    assert err["code"] == "timeout"
    assert time.monotonic() - started < 5
    log = broken_proxy.log()
    for key in (*UPSTREAM_KEYS, CLIENT_KEY):
        assert key not in log


MALFORMED_REQUESTS = {
    "duplicate_host": (b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nHost: evil.example\r\n"
                       b"Content-Length: 2\r\n\r\n{}", 400),
    "header_without_colon": (b"GET /v1/models HTTP/1.1\r\nHost: a\r\nthis is not a header\r\n\r\n", 400),
    "request_line_too_long": (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414),
}


@pytest.mark.parametrize("case", list(MALFORMED_REQUESTS))
def test_requests_the_http_server_cannot_parse_get_json_both_sdks_read(proxy: ProxyServer, case: str) -> None:
    raw, status = MALFORMED_REQUESTS[case]
    host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == str(status).encode()
    assert b"Content-Type: application/json" in head
    parsed = json.loads(body)
    assert parsed["type"] == "error" and parsed["error"]["type"] == "invalid_request_error"
    assert parsed["error"]["message"].startswith("The HTTP request could not be parsed")
