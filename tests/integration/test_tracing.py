"""OpenTelemetry traces (`tracing:`) through live gunicorn + gevent servers, received by a real
OTLP/HTTP receiver in the test and decoded with opentelemetry-proto: one SERVER span per request —
the child of the client's own span when the OpenAI SDK sends a `traceparent` — and one CLIENT span
per upstream attempt, with the GenAI attributes; the upstream received the attempt span's
`traceparent`; messages only with `capture_content`; the GenAI metrics over OTLP; and a collector
that is down changes nothing for clients, said once in the log."""

from __future__ import annotations

import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.conftest import CLIENT_KEY, UPSTREAM_KEYS, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy

pytestmark = pytest.mark.live

trace_pb = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2",
                               reason="pip install -e '.[test]' brings opentelemetry-proto")
metrics_pb = pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")

# Spans leave every 100 ms, an export waits at most 1 s: the test waits on what arrives, never a sleep.
OTEL_ENV = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "300",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
SERVER, CLIENT = 2, 3  # opentelemetry.proto.trace.v1.Span.SpanKind
WAIT_S = 20.0


def value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind)


class Receiver:
    """An OTLP/HTTP collector on loopback: what it received, decoded."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: set[str] = set()
        self.headers: list[dict[str, str]] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path == "/v1/traces":
                    request = trace_pb.ExportTraceServiceRequest.FromString(body)
                    for rs in request.resource_spans:
                        service = {a.key: value(a.value) for a in rs.resource.attributes}.get("service.name")
                        for ss in rs.scope_spans:
                            received.spans.extend(span_dict(s, service) for s in ss.spans)
                elif self.path == "/v1/metrics":
                    request = metrics_pb.ExportMetricsServiceRequest.FromString(body)
                    for rm in request.resource_metrics:
                        for sm in rm.scope_metrics:
                            received.metrics.update(m.name for m in sm.metrics)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, what: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            found = what()
            if found:
                return found
            time.sleep(0.05)  # polling what arrived, with a deadline: not a synchronisation sleep
        raise AssertionError("the collector did not receive it in time")

    def trace(self, trace_id: str, count: int) -> list[dict[str, Any]]:
        return self.wait_for(lambda: (s := [x for x in self.spans if x["trace_id"] == trace_id]) and
                             len(s) >= count and s)

    def stop(self) -> None:
        self.server.shutdown()


def span_dict(span: Any, service: str | None) -> dict[str, Any]:
    return {"name": span.name, "kind": span.kind, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
            "parent": span.parent_span_id.hex(), "service": service, "status": span.status.code,
            "attributes": {a.key: value(a.value) for a in span.attributes},
            "events": [(e.name, e.time_unix_nano) for e in span.events],
            "start": span.start_time_unix_nano, "end": span.end_time_unix_nano}


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def traced(demo_upstream: DemoUpstream, receiver: Receiver,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    config = base_config(demo_upstream.url, tracing={"enabled": True, "endpoint": receiver.url,
                                                     "service_name": "proxy-under-test",
                                                     "headers": {"x-collector-key": "collector-secret"}})
    config["upstreams"][0]["pool"] = {"probe": {"interval": 3600}}
    server = start_proxy(config, tmp_path_factory.mktemp("tracing"), extra_env=OTEL_ENV)
    yield server
    stop_proxy(server)
    demo_upstream.control("/_demo/keys", method="DELETE")


def traceparent() -> tuple[str, str, str]:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, parent, f"00-{trace_id}-{parent}-01"


def test_a_retried_stream_is_one_server_span_with_a_client_span_per_attempt(
        traced: ProxyServer, receiver: Receiver, demo_upstream: DemoUpstream) -> None:
    client = OpenAI(base_url=f"{traced.url}/v1", api_key=CLIENT_KEY, max_retries=0)
    for _ in range(2):  # the 429 is scripted on the first account's key: the pool may lease either first
        demo_upstream.control("/_demo/keys", body={UPSTREAM_KEYS[0]: {
            "status": 429, "body": {"error": {"message": "slow down", "type": "rate_limit_error"}}, "times": 1}})
        trace_id, parent, header = traceparent()
        rid = f"req_trace_{uuid.uuid4().hex[:10]}"
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hello"}], stream=True, max_tokens=50,
            temperature=0.5, top_p=0.9, stream_options={"include_usage": True},
            extra_headers={"traceparent": header, "x-request-id": rid})
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text
        if len(demo_upstream.requests(rid)) == 2:
            break
        demo_upstream.control("/_demo/keys", method="DELETE")
    spans = receiver.trace(trace_id, 3)
    (server,) = [s for s in spans if s["kind"] == SERVER]
    attempts = sorted((s for s in spans if s["kind"] == CLIENT), key=lambda s: s["attributes"]["llm_proxy.attempt"])
    assert len(attempts) == 2 and server["service"] == "proxy-under-test"
    # The client's trace goes on: the SERVER span is the child of the SDK's span, the attempts its children.
    assert server["parent"] == parent and all(a["parent"] == server["span_id"] for a in attempts)
    a = server["attributes"]
    assert server["name"] == "chat gpt-4o"
    assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"], a["gen_ai.request.model"]) == \
        ("chat", "openai", "gpt-4o")
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == \
        (50, 0.5, 0.9)
    assert a["gen_ai.response.model"] and a["gen_ai.response.id"].startswith("chatcmpl-")
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert a["llm_proxy.client_key"].startswith("key-") and a["llm_proxy.attempts"] == 2
    assert "gen_ai.input.messages" not in a and "error.type" not in a
    (event,) = [e for e in server["events"] if e[0] == "llm_proxy.first_chunk"]
    assert server["start"] < event[1] <= server["end"]
    failed, served = attempts
    assert failed["attributes"]["http.response.status_code"] == 429
    assert failed["attributes"]["error.type"] == failed["attributes"]["llm_proxy.failure_class"] != "ok"
    assert served["attributes"]["llm_proxy.failure_class"] == "ok" and "error.type" not in served["attributes"]
    for span in attempts:
        sa = span["attributes"]
        assert span["name"] == "chat gpt-4o" and sa["server.address"] == "127.0.0.1"
        assert sa["gen_ai.provider.name"] == "openai" and sa["llm_proxy.account"].startswith("acct-")
    # Tokens and the answer are the request's, on its SERVER span only: summed over GenAI spans, counted once.
    assert not [k for span in attempts for k in span["attributes"] if k.startswith(("gen_ai.usage.", "gen_ai.response."))]
    # Each upstream request carried its own attempt's span as traceparent.
    seen = demo_upstream.requests(rid)
    carried = [r["headers"].get("traceparent") or r["headers"].get("Traceparent") for r in seen]
    assert carried == [f"00-{trace_id}-{span['span_id']}-01" for span in attempts]
    # The collector's headers came with each export; no key of the proxy's is in any span.
    assert any(h.get("x-collector-key") == "collector-secret" for h in receiver.headers)
    dumped = json.dumps(spans)
    for secret in (CLIENT_KEY, *UPSTREAM_KEYS):
        assert secret not in dumped


def test_a_request_without_traceparent_starts_a_trace_and_a_refusal_has_its_error_type(
        traced: ProxyServer, receiver: Receiver) -> None:
    client = Anthropic(base_url=traced.url, api_key=CLIENT_KEY, max_retries=0)
    rid = f"req_trace_{uuid.uuid4().hex[:10]}"
    answer = client.messages.create(model="gpt-4o", max_tokens=20, messages=[{"role": "user", "content": "hi"}],
                                    extra_headers={"x-request-id": rid})
    assert answer.content
    (server,) = receiver.wait_for(lambda: [s for s in receiver.spans if s["kind"] == SERVER and
                                           s["attributes"].get("llm_proxy.request_id") == rid])
    assert server["parent"] == "" and server["attributes"]["gen_ai.provider.name"] == "anthropic"  # the client's API
    assert server["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    with pytest.raises(Exception, match="messages"):
        client.messages.create(model="gpt-4o", max_tokens=20, messages="no")  # type: ignore[arg-type]
    refused = receiver.wait_for(lambda: [s for s in receiver.spans if s["kind"] == SERVER and
                                         s["attributes"].get("error.type") == "invalid_request"])
    assert refused[0]["attributes"]["http.response.status_code"] == 400 and refused[0]["status"] == 2  # ERROR


def test_content_and_metrics_only_when_asked(demo_upstream: DemoUpstream, receiver: Receiver, tmp_path: Path) -> None:
    config = base_config(demo_upstream.url, tracing={"enabled": True, "endpoint": receiver.url,
                                                     "capture_content": True, "metrics": True})
    server = start_proxy(config, tmp_path, extra_env=OTEL_ENV)
    try:
        trace_id, _, header = traceparent()
        OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "a secret recipe"}],
            extra_headers={"traceparent": header})
        (span,) = [s for s in receiver.trace(trace_id, 2) if s["kind"] == SERVER]
        messages = json.loads(span["attributes"]["gen_ai.input.messages"])
        assert messages[0]["role"] == "user" and "a secret recipe" in json.dumps(messages)
        assert receiver.wait_for(lambda: {"gen_ai.server.request.duration", "gen_ai.server.time_to_first_token",
                                          "gen_ai.client.token.usage"} <= receiver.metrics)
    finally:
        stop_proxy(server)


def test_a_dead_collector_changes_nothing_for_clients_and_is_said_once(demo_upstream: DemoUpstream,
                                                                      tmp_path: Path) -> None:
    closed = Receiver()
    closed.stop()
    closed.server.server_close()  # nothing listens there now
    config = base_config(demo_upstream.url, tracing={"enabled": True, "endpoint": closed.url})
    server = start_proxy(config, tmp_path, extra_env=OTEL_ENV)
    try:
        client = OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0)
        for _ in range(3):
            assert client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}]).choices
        deadline = time.monotonic() + WAIT_S
        while "tracing: cannot export spans" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the log with a deadline
        for _ in range(3):  # more batches to the dead collector while it stays down
            stream = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                                    stream=True)
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    finally:
        stop_proxy(server)  # the worker's exit flushes once more, to the same dead collector
    assert f"tracing:    on, OTLP/HTTP to {closed.url}, sample 1" in server.log()  # the startup summary
    lines = server.log().splitlines()
    assert len([line for line in lines if "tracing: cannot export spans" in line]) == 1
    assert not [line for line in lines if "opentelemetry" in line or "Traceback" in line]
