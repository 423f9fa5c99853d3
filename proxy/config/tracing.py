"""The `tracing:` section: OpenTelemetry traces (and optionally metrics) of every request.

  tracing:
    enabled: false            # needs the `otel` extra: pip install 'llm-proxy[otel]'
    endpoint: null            # the collector's base URL (/v1/traces, /v1/metrics are added);
                              # null: the standard OTEL_EXPORTER_OTLP_* variables, else localhost:4318
    headers: {}               # sent with every export (an API key of a hosted collector: ${VAR})
    service_name: llm-proxy   # the `service.name` resource attribute
    sample: 1.0               # the fraction of traces kept (a client's sampled traceparent is followed)
    capture_content: false    # true: the messages in and out as gen_ai.input/output.messages
    metrics: false            # true: the GenAI metrics over OTLP too, beside /metrics

Owns their shape, defaults and checks. Import-light: stdlib only (whether the extra is installed
is the config check's: proxy/serving/config_check.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.config.values import ConfigError, bool_, join, known, mapping, number, str_, str_map

MISSING_EXTRA = "tracing needs the otel extra: pip install 'llm-proxy[otel]'"


@dataclass(frozen=True)
class TracingConfig:
    enabled: bool = False
    endpoint: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold a collector's key
    service_name: str = "llm-proxy"
    sample: float = 1.0
    capture_content: bool = False
    metrics: bool = False


def parse_tracing(raw: Any, path: str = "tracing") -> TracingConfig:
    section = mapping(raw, path)
    known(section, path, {"enabled", "endpoint", "headers", "service_name", "sample", "capture_content", "metrics"})
    default = TracingConfig()
    endpoint = section.get("endpoint")
    if endpoint is not None:
        endpoint = str_(endpoint, join(path, "endpoint")).rstrip("/")
        if not endpoint.startswith(("http://", "https://")):
            raise ConfigError(join(path, "endpoint"), f"must be the collector's http:// or https:// base URL, such as "
                                                      f"http://otel-collector:4318 (got {endpoint!r})")
    sample = number(section.get("sample", default.sample), join(path, "sample"), minimum=0)
    if sample > 1:
        raise ConfigError(join(path, "sample"), f"must be a fraction from 0.0 to 1.0 (got {sample:g})")
    return TracingConfig(
        enabled=bool_(section.get("enabled", default.enabled), join(path, "enabled")),
        endpoint=endpoint,
        headers=str_map(section.get("headers", {}), join(path, "headers")),
        service_name=str_(section.get("service_name", default.service_name), join(path, "service_name")),
        sample=sample,
        capture_content=bool_(section.get("capture_content", default.capture_content), join(path, "capture_content")),
        metrics=bool_(section.get("metrics", default.metrics), join(path, "metrics")),
    )
