"""The config reference's entries for the sections operators look through — `request_log:` and
`tracing:` — — described as `proxy.config.spec` describes the
rest, kept here so that module stays one screenful a concern. Import-light: stdlib only.
"""

from __future__ import annotations

from proxy.config.request_log import ERROR_MODES
from proxy.config.spec_parts import BOOLEAN, SIZE, STRING, Section, number, one_of, string_map
from proxy.config.spec_parts import key as _k

REQUEST_LOG = Section((
    _k("enabled", BOOLEAN, "Keep the chosen requests with their four bodies (the client's request, each attempt's "
                           "request and answer, what the client got) for `GET /admin/requests/{id}`. Cannot "
                           "change on a reload.", "false",
       applies=("request_log.enabled", False)),
    _k("keys", {"type": "array", "items": {"type": "string"}},
       "Client key names (globs) whose requests are chosen.", '`["*"]`', applies=("request_log.keys", ("*",))),
    _k("sample", {"type": "number", "minimum": 0, "maximum": 1},
       "The fraction of the chosen keys' requests kept, 0.0 to 1.0.", "1.0", applies=("request_log.sample", 1.0)),
    _k("errors", one_of(ERROR_MODES), "`always`: a failed request of a chosen key is kept whatever the sample; "
                                      "`sampled`: as any other.", "always",
       applies=("request_log.errors", "always")),
    _k("max_body_bytes", SIZE, "Each body is kept up to this many bytes; its full size is noted.", "256KiB",
       applies=("request_log.max_body_bytes", 262144)),
    _k("retention_hours", number(0.001), "Hours a request is kept. Cannot change on a reload.", "72",
       applies=("request_log.retention_hours", 72.0)),
    _k("max_total_mb", number(0.001), "The log's size bound in MiB: beyond it the oldest requests are dropped "
                                      "(and counted). Cannot change on a reload.", "256",
       applies=("request_log.max_total_mb", 256.0)),
    _k("redact", {"type": "array", "items": {"type": "string"}},
       "Replaced by `[redacted]` in every stored body: JSON paths (`$.messages[*].content`) or regular "
       "expressions. Keys and `Authorization`-type headers are never stored whatever this says.", "`[]`",
       applies=("request_log.redact", ())),

))

TRACING = Section((
    _k("enabled", BOOLEAN, "Send OpenTelemetry traces: a SERVER span per request, a CLIENT span per upstream attempt, "
                           "in the GenAI conventions. Needs the `otel` extra (`pip install 'llm-proxy[otel]'`). "
                           "Cannot change on a reload.", "false", applies=("tracing.enabled", False)),
    _k("endpoint", STRING, "The collector's base URL (`http://otel-collector:4318`): `/v1/traces` and `/v1/metrics` "
                           "are added, as for `OTEL_EXPORTER_OTLP_ENDPOINT`. Unset: the standard "
                           "`OTEL_EXPORTER_OTLP_*` variables, else `http://localhost:4318`.", "unset",
       applies=("tracing.endpoint", None)),
    _k("headers", string_map("header name → value"),
       "Headers sent with every export (a hosted collector's key: `${VAR}`).", "`{}`",
       applies=("tracing.headers", {})),
    _k("service_name", STRING, "The `service.name` of the spans.", "llm-proxy",
       applies=("tracing.service_name", "llm-proxy")),
    _k("sample", {"type": "number", "minimum": 0, "maximum": 1},
       "The fraction of traces kept, 0.0 to 1.0; a client's `traceparent` decides for its own trace.", "1.0",
       applies=("tracing.sample", 1.0)),
    _k("capture_content", BOOLEAN, "Put the messages in and out on the spans (`gen_ai.input.messages`, "
                                   "`gen_ai.output.messages`); off, no content leaves the proxy.", "false",
       applies=("tracing.capture_content", False)),
    _k("metrics", BOOLEAN, "Export the GenAI metrics (`gen_ai.server.request.duration`, "
                           "`gen_ai.server.time_to_first_token`, `gen_ai.client.token.usage`) over OTLP too, beside "
                           "`/metrics`.", "false", applies=("tracing.metrics", False)),
))
