"""The `usage:` section: how long the per-minute usage figures are kept.

Owns `usage.retention_days` (default 90): minutes older than that are purged from the state store
(`proxy/ops/usage_store.py`). Import-light: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.config.values import int_, join, known, mapping


@dataclass(frozen=True)
class UsageConfig:
    retention_days: int = 90  # per-minute usage rows older than this are deleted


def parse_usage(raw: Any, path: str) -> UsageConfig:
    section = mapping(raw, path)
    known(section, path, {"retention_days"})
    default = UsageConfig()
    return UsageConfig(retention_days=int_(section.get("retention_days", default.retention_days),
                                           join(path, "retention_days"), minimum=1))
