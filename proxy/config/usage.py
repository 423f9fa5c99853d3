"""The `usage:` section: whether requests are accounted, and how long the figures are kept.

Owns `usage.enabled` (default true; false saves each request's accounting write, and the usage API
then answers 404) and `usage.retention_days` (default 90): minutes older than that are purged from
the state store (`proxy/ops/usage_store.py`). Import-light: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.config.values import bool_, int_, join, known, mapping


@dataclass(frozen=True)
class UsageConfig:
    enabled: bool = True  # account every request (GET /admin/usage, /admin/requests)
    retention_days: int = 90  # per-minute usage rows older than this are deleted


def parse_usage(raw: Any, path: str) -> UsageConfig:
    section = mapping(raw, path)
    known(section, path, {"enabled", "retention_days"})
    default = UsageConfig()
    return UsageConfig(enabled=bool_(section.get("enabled", default.enabled), join(path, "enabled")),
                       retention_days=int_(section.get("retention_days", default.retention_days),
                                           join(path, "retention_days"), minimum=1))
