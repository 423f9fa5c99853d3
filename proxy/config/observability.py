"""The `metrics:` and `logging:` sections: what operators see of the proxy at work.

  metrics:
    enabled: true    # count requests, attempts, tokens and timings for GET /metrics
    public: false    # true: GET /metrics needs no key (otherwise an admin key)
  logging:
    format: text     # text | json (one JSON object per line, every line)

Owns their shape, defaults and checks. Import-light (stdlib only), like the rest of `proxy.config`:
gunicorn's master reads `logging.format` before it writes its first line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.config.values import bool_, choice, known, mapping

LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = True
    public: bool = False  # serve GET /metrics without a key


@dataclass(frozen=True)
class LoggingConfig:
    format: str = "text"  # LOG_FORMATS


def parse_metrics(raw: Any, path: str = "metrics") -> MetricsConfig:
    m = mapping(raw, path)
    known(m, path, {"enabled", "public"})
    return MetricsConfig(enabled=bool_(m.get("enabled", True), f"{path}.enabled"),
                         public=bool_(m.get("public", False), f"{path}.public"))


def parse_logging(raw: Any, path: str = "logging") -> LoggingConfig:
    m = mapping(raw, path)
    known(m, path, {"format"})
    return LoggingConfig(format=choice(m.get("format", "text"), f"{path}.format", LOG_FORMATS))
