"""A stream that ended cleanly hands its upstream connection back for the next request (the
streaming engine reads the body below http.client and must return the connection itself); one
that broke off does not."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import uuid
from pathlib import Path

import anthropic
import openai

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.integration.upstreams import words

PROMPT = "hi [demo:pace=0] [demo:words=3]"


def connection_of(demo: DemoUpstream, request_id: str) -> int:
    (record,) = demo.requests(request_id)
    return int(record["connection"])


def test_streams_in_a_row_share_one_upstream_connection(proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    oai = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0)
    ant = anthropic.Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0)
    request_ids = [uuid.uuid4().hex for _ in range(6)]
    for i, request_id in enumerate(request_ids):
        headers = {"X-Request-Id": request_id}
        if i % 2:  # Messages client: translated to the Chat upstream
            with ant.messages.stream(model="demo-model", max_tokens=50, extra_headers=headers,
                                     messages=[{"role": "user", "content": PROMPT}]) as stream:
                assert stream.get_final_text() == words(3)
        else:  # Chat client: passthrough
            with oai.chat.completions.stream(model="demo-model", extra_headers=headers,
                                             messages=[{"role": "user", "content": PROMPT}]) as stream:
                assert stream.get_final_completion().choices[0].message.content == words(3)
    connections = [connection_of(demo_upstream, request_id) for request_id in request_ids]
    assert len(set(connections)) == 1, connections


def test_a_stream_cut_by_its_client_does_not_return_its_connection(proxy: ProxyServer,
                                                                    demo_upstream: DemoUpstream) -> None:
    oai = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0)
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    stream = oai.chat.completions.create(model="demo-model", stream=True, extra_headers={"X-Request-Id": first},
                                         messages=[{"role": "user", "content": "hi [demo:words=200]"}])
    next(iter(stream))
    stream.close()  # the client leaves mid-stream: the proxy must close that upstream connection
    with oai.chat.completions.stream(model="demo-model", extra_headers={"X-Request-Id": second},
                                     messages=[{"role": "user", "content": PROMPT}]) as again:
        assert again.get_final_completion().choices[0].message.content == words(3)
    assert connection_of(demo_upstream, second) != connection_of(demo_upstream, first)


class LateEndUpstream:
    """A Chat upstream on one thread that answers every request with a stream whose `data: [DONE]`
    arrives in one write and whose end of body (the `0` chunk) only when the test says: the case
    where the protocol's terminator reaches the proxy before the end of the HTTP body."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.requests = 0
        self.lines: list[tuple[int, bytes]] = []  # (connection number, request line)
        self.send_end = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), b"0"))
                reader.read(length)
                self.requests += 1
                self.lines.append((self.connections, head.split(b'\r\n')[0]))
                delta = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hello"},
                                      "finish_reason": None}]}
                last = {**delta, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                body = b"".join(b"data: %s\n\n" % json.dumps(e).encode() for e in (delta, last)) + b"data: [DONE]\n\n"
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(body), body))
                if not self.send_end.wait(10):
                    return
                self.send_end.clear()
                conn.sendall(b"0\r\n\r\n")

    def close(self) -> None:
        self.listener.close()


def test_a_body_ending_after_its_terminator_still_returns_its_connection(tmp_path: Path) -> None:
    upstream = LateEndUpstream()
    server = start_proxy({"client_keys": [CLIENT_KEY], "upstreams": [{
        "name": "late", "protocol": "chat_completions", "base_url": upstream.url,
        "accounts": [{"id": "late-0", "api_key": "sk-late-end-0"}]}]}, tmp_path)
    host, port = server.url.removeprefix("http://").split(":")
    client = http.client.HTTPConnection(host, int(port), timeout=20)
    try:
        for _ in range(3):
            # One client connection, kept alive: the proxy takes its next request only once it has
            # closed the last one — which is when it reads on to the upstream body's end.
            client.request("POST", "/v1/chat/completions", headers={
                "Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"},
                body=json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}))
            answer = client.getresponse()
            events = answer.read().decode()
            assert answer.status == 200 and '"content":"hello"' in events.replace(" ", "")
            assert events.rstrip().endswith("data: [DONE]")
            # The client has its whole answer; only now does the upstream end its body.
            upstream.send_end.set()
        assert upstream.requests == 3
        assert upstream.connections == 1, upstream.lines
    finally:
        client.close()
        stop_proxy(server)
        upstream.close()
