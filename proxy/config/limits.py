"""A named client key's `limits:` block — how much one key may use, whichever worker or host serves it.

Owns the shape and checks of `limits: {requests_per_minute, tokens_per_minute, tokens_per_day,
tokens_per_month, max_concurrent}` (each optional, a whole number ≥ 1; leaving one out means no such
limit). What each means and how it is enforced is proxy/limits/'s. Import-light: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.config.values import ConfigError, int_, join, known, mapping

LIMIT_NAMES = ("requests_per_minute", "tokens_per_minute", "tokens_per_day", "tokens_per_month", "max_concurrent")


@dataclass(frozen=True)
class KeyLimits:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None  # input (cached included) + output tokens, as the upstream reports them
    tokens_per_day: int | None = None  # per UTC day
    tokens_per_month: int | None = None  # per UTC calendar month
    max_concurrent: int | None = None  # requests in flight at once (a stream counts until it ends)

    @property
    def counts_tokens(self) -> bool:
        return any(v is not None for v in (self.tokens_per_minute, self.tokens_per_day, self.tokens_per_month))

    def items(self) -> list[tuple[str, int]]:
        """The limits that are set, by config name."""
        return [(name, value) for name in LIMIT_NAMES if (value := getattr(self, name)) is not None]


def parse_limits(raw: Any, path: str) -> KeyLimits | None:
    if raw is None:
        return None
    section = mapping(raw, path)
    known(section, path, set(LIMIT_NAMES))
    if not section:
        raise ConfigError(path, "sets no limit: name at least one of " + ", ".join(LIMIT_NAMES)
                                + " (or leave limits out)")
    return KeyLimits(**{name: int_(value, join(path, name), minimum=1) for name, value in section.items()
                        if value is not None})
