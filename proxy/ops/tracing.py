"""OpenTelemetry traces of every request, in the GenAI semantic conventions (`tracing:`).

Owns the spans and how they leave the worker. A hook (`Tracing`): when a completion request
arrives it starts a SERVER span — the child of the client's own span when the request carries a
W3C `traceparent` — and puts a `RequestTrace` on the record; each attempt starts a CLIENT span
under it, whose context goes to the upstream as `traceparent` (`attempt_started`, called by the
attempt); an attempt that failed or answered whole ends its span when the `attempt` hook hears of
it, a streamed one when the request ends. When the request ends the SERVER span gets what the
request turned out to be — the model asked and served (`llm_proxy.served_model` when a fallback
answered), the answer's id and finish reason, the sampling settings asked for, the usage (with the
cache and reasoning counts), the conversation affinity keyed it by, `error.type` — and only it: a
CLIENT span says which account was tried and how that went, so a tool that sums tokens over GenAI
spans counts each request once. The time to the first chunk is an event (`llm_proxy.first_chunk`,
stamped when it happened: nothing runs per chunk). Names:
`"{gen_ai.operation.name} {gen_ai.request.model}"`, operation `chat`; `gen_ai.provider.name` from
the protocol (`Protocol.provider`) or a known upstream host; the proxy's own as `llm_proxy.*` (the
key's name, never a key). The messages sent only with `capture_content`.

Spans leave through a BatchSpanProcessor (its own greenlet under gevent: off the request path) to
an OTLP/HTTP exporter wrapped in `OneLineExporter`: a collector that is down costs no request, and
the log says so once per outage, and once when it is back — the exporter's own per-batch
warnings are silenced. With `tracing.metrics`, the GenAI metrics go over OTLP too. The
OpenTelemetry packages are the `otel` extra, imported only when tracing is on (`Tracing()`), in each
worker (the app is built after gunicorn forks), and flushed when the worker exits (`flush_all`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from proxy.config.tracing import MISSING_EXTRA, TracingConfig
from proxy.config.values import ConfigError
from proxy.ops.hooks import Hooks
from proxy.ops.records import OK, Arrival, AttemptRecord, AttemptStart, RequestRecord
from proxy.protocols.providers import provider_at

log = logging.getLogger("proxy.tracing")

OPERATION = "chat"  # every endpoint traced here is a chat completion, whatever its protocol
_providers: list[Any] = []  # this worker's tracer and meter providers, flushed at exit


class OneLineExporter:
    """An exporter that never raises and says a collector is unreachable once, not once a batch."""

    def __init__(self, inner: Any, what: str) -> None:
        self.inner, self.what = inner, what
        self.down = False

    def export(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = self.inner.export(batch, *args, **kwargs)
        except Exception as exc:
            result, error = None, f"{type(exc).__name__}: {exc}"
        else:
            error = "the collector did not take the batch"
        ok = result is not None and getattr(result, "name", "") == "SUCCESS"
        if not ok and not self.down:
            self.down = True
            log.warning("tracing: cannot export %s to the collector (%s); requests go on, and what cannot be sent "
                        "is dropped until it answers again", self.what, error)
        elif ok and self.down:
            self.down = False
            log.info("tracing: the collector takes %s again", self.what)
        if result is None:
            return self.failure()
        return result

    def failure(self) -> Any:
        if self.what == "metrics":
            from opentelemetry.sdk.metrics.export import MetricExportResult

            return MetricExportResult.FAILURE
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.FAILURE

    def __getattr__(self, name: str) -> Any:  # shutdown, force_flush, the metric exporter's settings
        return getattr(self.inner, name)


class RequestTrace:
    """Tracing's hold on one request: its SERVER span and the CLIENT span of each attempt."""

    __slots__ = ("attempts", "server", "tracing")

    def __init__(self, tracing: Tracing, server: Any) -> None:
        self.tracing, self.server = tracing, server
        self.attempts: dict[int, Any] = {}

    def attempt_started(self, start: AttemptStart) -> Mapping[str, str]:
        tracing = self.tracing
        where = urlsplit(start.server)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.provider.name": provider_at(where.hostname or "", tracing.provider_of(start.upstream_protocol)),
            "gen_ai.request.model": start.upstream_model,
            "server.address": where.hostname or "",
            "server.port": where.port or (443 if where.scheme == "https" else 80),
            "llm_proxy.upstream": start.upstream,
            "llm_proxy.account": start.account,
            "llm_proxy.attempt": start.number,
        }
        span = tracing.tracer.start_span(f"{OPERATION} {start.upstream_model}", tracing.in_span(self.server),
                                         kind=tracing.client_kind, attributes=attributes)
        self.attempts[start.number] = span
        # The W3C header of this span, written directly (the propagator's inject costs several times more).
        context = span.get_span_context()
        carrier = {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"}
        if context.trace_state:
            carrier["tracestate"] = context.trace_state.to_header()
        return carrier


class Tracing(Hooks):
    """The hook that traces requests (see the module's docstring)."""

    def __init__(self, config: TracingConfig, provider_of: Callable[[str], str]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.config, self.provider_of = config, provider_of
        provider, meter = _providers_for(config)
        self.tracer = provider.get_tracer("llm-proxy")
        self.in_span = trace.set_span_in_context
        self.client_kind, self.server_kind = trace.SpanKind.CLIENT, trace.SpanKind.SERVER
        self.error_status = trace.Status(trace.StatusCode.ERROR)
        self.propagator = TraceContextTextMapPropagator()
        self.instruments = _Instruments(meter) if meter is not None else None

    def request_arrived(self, record: RequestRecord, arrival: Arrival) -> None:
        parent = self.propagator.extract(arrival.headers) if "traceparent" in arrival.headers else None
        span = self.tracer.start_span(OPERATION, parent, kind=self.server_kind,
                                      start_time=int(record.started * 1e9),
                                      attributes={"gen_ai.operation.name": OPERATION,
                                                  "gen_ai.provider.name": self.provider_of(record.client_protocol),
                                                  "llm_proxy.request_id": record.request_id,
                                                  "llm_proxy.client_key": record.client_key})
        record.trace = RequestTrace(self, span)

    def attempt(self, told: AttemptRecord) -> None:
        request = told.request
        trace = request.trace if request is not None else None
        if not isinstance(trace, RequestTrace):
            return
        span = trace.attempts.get(told.number)
        if span is None:
            return
        # One call with every attribute: the SDK checks each value, and each call costs besides.
        attributes: dict[str, Any] = {"llm_proxy.failure_class": told.klass}
        if told.status is not None:
            attributes["http.response.status_code"] = told.status
        if told.klass != OK:
            attributes["error.type"] = told.klass
            span.set_status(self.error_status)
        if told.action == "stream":  # a stream's attempt ends with the stream
            span.set_attributes(attributes)
            return
        trace.attempts.pop(told.number)
        span.set_attributes(attributes)
        span.end()

    def request_done(self, record: RequestRecord) -> None:
        trace = record.trace
        if not isinstance(trace, RequestTrace):
            return
        for span in trace.attempts.values():  # a stream's attempt: it ended with the stream
            if record.outcome != OK:
                span.set_attributes({"error.type": record.outcome})
                span.set_status(self.error_status)
            span.end()
        trace.attempts.clear()
        span = trace.server
        span.update_name(f"{OPERATION} {record.model}" if record.model else OPERATION)
        attributes: dict[str, Any] = {"gen_ai.request.model": record.model, "llm_proxy.attempts": record.attempts,
                                      "llm_proxy.stream": record.stream, "http.response.status_code": record.status}
        if record.conversation_id:
            attributes["gen_ai.conversation.id"] = record.conversation_id
        if record.served_model:  # a fallback answered: the client model it answered with
            attributes["llm_proxy.served_model"] = record.served_model
        request = _decoded(record)
        if request is not None:
            for name, value in (("max_tokens", request.max_tokens), ("temperature", request.temperature),
                                ("top_p", request.top_p)):
                if value is not None:
                    attributes[f"gen_ai.request.{name}"] = value
            if self.config.capture_content:
                attributes["gen_ai.input.messages"] = _messages_json(request)
        attributes.update(_answer_attributes(record))
        if record.outcome != OK:
            attributes["error.type"] = record.outcome
            span.set_status(self.error_status)
        span.set_attributes(attributes)
        if record.first_byte_s is not None and record.status < 400:
            span.add_event("llm_proxy.first_chunk", {"llm_proxy.time_to_first_chunk_ms": record.first_byte_s * 1000},
                           timestamp=int((record.started + record.first_byte_s) * 1e9))
        end = record.started + (record.duration_s or 0.0)
        span.end(end_time=int(max(end, record.started) * 1e9))
        if self.instruments is not None:
            self.instruments.record(record, self.provider_of(record.client_protocol))


def _answer_attributes(record: RequestRecord) -> dict[str, Any]:
    """What the answer said of itself and what it used."""
    attributes: dict[str, Any] = {}
    if record.response_model or record.upstream_model:
        attributes["gen_ai.response.model"] = record.response_model or record.upstream_model
    if record.response_id:
        attributes["gen_ai.response.id"] = record.response_id
    if record.finish_reason:
        attributes["gen_ai.response.finish_reasons"] = (record.finish_reason,)
    usage = record.usage
    if usage is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        # The rest only when there is some: each attribute costs the exporter as much as the span's share.
        for name, count in (("cache_read.input_tokens", usage.cache_read_tokens),
                            ("cache_creation.input_tokens", usage.cache_write_tokens),
                            ("reasoning.output_tokens", usage.reasoning_tokens)):
            if count:
                attributes[f"gen_ai.usage.{name}"] = count
    return attributes


def _decoded(record: RequestRecord) -> Any:
    if record.decoded is None:
        return None
    try:
        return record.decoded()
    except Exception:  # a body its decoder refuses: the span goes without its settings
        return None


def _messages_json(request: Any) -> str:
    """The request's messages as the conventions' `gen_ai.input.messages`: each a role and its parts
    (text; tool calls and their results; other parts by their kind, their bytes left out), JSON."""
    out = []
    for message in request.messages:
        parts: list[dict[str, Any]] = []
        for part in message.parts:
            kind = type(part).__name__
            if kind == "TextPart":
                parts.append({"type": "text", "content": part.text})
            elif kind == "ToolCallPart":
                parts.append({"type": "tool_call", "id": part.id, "name": part.name, "arguments": part.arguments})
            elif kind == "ToolResultPart":
                parts.append({"type": "tool_call_response", "id": part.call_id, "response": part.text()})
            else:
                parts.append({"type": kind.removesuffix("Part").lower()})
        out.append({"role": message.role, "parts": parts})
    return json.dumps(out)


class _Instruments:
    """The GenAI metrics, recorded when each request ends."""

    def __init__(self, meter: Any) -> None:
        self.duration = meter.create_histogram("gen_ai.server.request.duration", unit="s",
                                               description="GenAI server request duration")
        self.first_token = meter.create_histogram("gen_ai.server.time_to_first_token", unit="s",
                                                  description="Time to generate the first token")
        self.tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}",
                                             description="Number of input and output tokens used")

    def record(self, record: RequestRecord, provider: str) -> None:
        common = {"gen_ai.operation.name": OPERATION, "gen_ai.provider.name": provider,
                  "gen_ai.request.model": record.model}
        if record.outcome != OK:
            common["error.type"] = record.outcome
        if record.duration_s is not None:
            self.duration.record(record.duration_s, common)
        if record.first_byte_s is not None and record.status < 400:
            self.first_token.record(record.first_byte_s, common)
        if record.usage is not None:
            self.tokens.record(record.usage.input_tokens, {**common, "gen_ai.token.type": "input"})
            self.tokens.record(record.usage.output_tokens, {**common, "gen_ai.token.type": "output"})


def _providers_for(config: TracingConfig) -> tuple[Any, Any]:
    """This worker's tracer provider (and meter provider with `metrics`), exporting to the config's
    collector, else where the standard OTEL_EXPORTER_OTLP_* variables say."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError:
        raise ConfigError("tracing.enabled", MISSING_EXTRA) from None
    # The exporters' own lines about each failed batch: our exporter's one line per outage says it.
    logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
    resource = Resource.create({"service.name": config.service_name})
    endpoint = (lambda path: f"{config.endpoint}{path}") if config.endpoint else (lambda path: None)
    headers = dict(config.headers) or None
    provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample)))
    spans: Any = OneLineExporter(OTLPSpanExporter(endpoint=endpoint("/v1/traces"), headers=headers), "spans")
    provider.add_span_processor(BatchSpanProcessor(spans))
    _providers.append(provider)
    meter = None
    if config.metrics:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        metrics: Any = OneLineExporter(OTLPMetricExporter(endpoint=endpoint("/v1/metrics"), headers=headers), "metrics")
        reader = PeriodicExportingMetricReader(metrics)
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        _providers.append(meter_provider)
        meter = meter_provider.get_meter("llm-proxy")
    return provider, meter


def flush_all(timeout_s: float = 5.0) -> None:
    """Send what this worker's providers hold, then stop them (gunicorn's worker_exit hook)."""
    deadline = time.monotonic() + timeout_s
    for provider in list(_providers):
        try:
            provider.force_flush(max(0.1, deadline - time.monotonic()) * 1000)
            provider.shutdown()
        except Exception:
            log.exception("tracing: the last flush failed")
    _providers.clear()
