"""A stream that ended cleanly hands its upstream connection back for the next request (the
streaming engine reads the body below http.client and must return the connection itself); one
that broke off does not."""

from __future__ import annotations

import uuid

import anthropic
import openai

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer
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
