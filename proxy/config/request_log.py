"""The `request_log:` section: which requests are kept with their bodies, and within what bounds.

  request_log:
    enabled: false          # keep the bodies of the requests chosen below
    keys: ["*"]             # client key names (globs) whose requests are chosen
    sample: 1.0             # the fraction of their requests kept (0.0 to 1.0)
    errors: always          # always: a failed request of a chosen key is kept whatever the sample
    max_body_bytes: 256KiB  # each body kept up to this; its full size is noted
    retention_hours: 72     # requests older than this are dropped
    max_total_mb: 256       # the log's size bound: the oldest requests are dropped beyond it
    redact: []              # JSON paths ($.messages[*].content) or regular expressions, replaced in every body

Owns their shape, defaults and checks (a regular expression that does not compile is a config
error naming it). Import-light: stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.config.values import ConfigError, bool_, choice, join, known, mapping, number, size, str_

ERROR_MODES = ("always", "sampled")
JSON_PATH = re.compile(r"^\$(\.[A-Za-z_][A-Za-z0-9_-]*(\[(\*|\d+)\])?|\[(\*|\d+)\])+$")


@dataclass(frozen=True)
class RequestLogConfig:
    enabled: bool = False
    keys: tuple[str, ...] = ("*",)
    sample: float = 1.0
    errors: str = "always"  # ERROR_MODES
    max_body_bytes: int = 256 * 1024
    retention_hours: float = 72.0
    max_total_mb: float = 256.0
    redact: tuple[str, ...] = ()  # "$.a.b[*].c" JSON paths, else regular expressions

    @property
    def max_total_bytes(self) -> int:
        return int(self.max_total_mb * 2**20)


def parse_request_log(raw: Any, path: str = "request_log") -> RequestLogConfig:
    section = mapping(raw, path)
    known(section, path, {"enabled", "keys", "sample", "errors", "max_body_bytes", "retention_hours",
                          "max_total_mb", "redact"})
    default = RequestLogConfig()
    sample = number(section.get("sample", default.sample), join(path, "sample"), minimum=0)
    if sample > 1:
        raise ConfigError(join(path, "sample"), f"must be a fraction from 0.0 to 1.0 (got {sample:g})")
    return RequestLogConfig(
        enabled=bool_(section.get("enabled", default.enabled), join(path, "enabled")),
        keys=_strings(section.get("keys", list(default.keys)), join(path, "keys")),
        sample=sample,
        errors=choice(section.get("errors", default.errors), join(path, "errors"), ERROR_MODES),
        max_body_bytes=size(section.get("max_body_bytes", default.max_body_bytes), join(path, "max_body_bytes")),
        retention_hours=_positive(section.get("retention_hours", default.retention_hours),
                                  join(path, "retention_hours")),
        max_total_mb=_positive(section.get("max_total_mb", default.max_total_mb), join(path, "max_total_mb")),
        redact=tuple(_redaction(r, f"{join(path, 'redact')}[{i}]")
                     for i, r in enumerate(_strings(section.get("redact", []), join(path, "redact")))),
    )


def _positive(value: Any, path: str) -> float:
    n = number(value, path, minimum=0)
    if n <= 0:
        raise ConfigError(path, "must be more than 0")
    return n


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(path, "must be a list of strings")
    return tuple(str_(v, f"{path}[{i}]") for i, v in enumerate(value))


def _redaction(rule: str, path: str) -> str:
    """A JSON path (`$.` then field names, `[*]` or `[n]`) or a regular expression that compiles."""
    if rule.startswith("$"):
        if not JSON_PATH.match(rule):
            raise ConfigError(path, f"{rule!r} is not a JSON path this proxy takes: $ then .field, [*] or [n] "
                                    "steps (e.g. $.messages[*].content)")
        return rule
    try:
        re.compile(rule)
    except re.error as exc:
        raise ConfigError(path, f"{rule!r} is not a valid regular expression: {exc}") from None
    return rule


def log_path(state_path: str) -> str:
    """The request log's SQLite file, beside the state file: `state.db` → `state.requests.db`."""
    path = Path(state_path)
    return str(path.with_name(path.stem + ".requests.db" if path.suffix else path.name + ".requests.db"))
