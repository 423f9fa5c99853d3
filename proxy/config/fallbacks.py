"""The config's model fallbacks and the bounds on them: `fallbacks:`, `context_window_fallbacks:`,
`max_attempts_total` and `fallbacks_max_cost_ratio` (all top-level).

Owns parsing them into `FallbackSettings` and which list of other models a client model falls back
to (the first glob, in the order the config writes them, that matches it). Whether a failure calls
for a fallback, and walking the list, is the relay's (proxy/relay/fallbacks.py). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from proxy.config.values import ConfigError, int_, join, mapping, number, str_

DEFAULT_MAX_ATTEMPTS_TOTAL = 10  # the default of `pool.max_attempts` before this cap existed


@dataclass(frozen=True)
class FallbackSettings:
    # (client model glob, the client models tried after it, in order), in the config's order
    fallbacks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    context_window: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the same, for a prompt too long
    max_attempts_total: int = DEFAULT_MAX_ATTEMPTS_TOTAL  # upstream calls one request may make, in all
    max_cost_ratio: float | None = None  # skip a fallback whose output price is over this times the model's

    def for_model(self, model: str, too_long: bool = False) -> tuple[str, ...]:
        """The models `model` falls back to: its `context_window_fallbacks` when the upstream refused
        the prompt as too long, else its `fallbacks`."""
        for pattern, models in self.context_window if too_long else self.fallbacks:
            if fnmatchcase(model, pattern):
                return models
        return ()


def parse_fallbacks(top: dict[str, Any]) -> FallbackSettings:
    ratio = top.get("fallbacks_max_cost_ratio")
    return FallbackSettings(
        fallbacks=_chains(top.get("fallbacks"), "fallbacks"),
        context_window=_chains(top.get("context_window_fallbacks"), "context_window_fallbacks"),
        max_attempts_total=int_(top.get("max_attempts_total", DEFAULT_MAX_ATTEMPTS_TOTAL), "max_attempts_total",
                                minimum=1),
        max_cost_ratio=None if ratio is None else number(ratio, "fallbacks_max_cost_ratio", minimum=0.0001),
    )


def _chains(raw: Any, path: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if raw is None:
        return ()
    chains = []
    for pattern, models in mapping(raw, path).items():
        where = join(path, str(pattern))
        if isinstance(models, str):
            models = [models]
        if not isinstance(models, list) or not models:
            raise ConfigError(where, "must be a list of the client model names tried in its place, in order "
                                     "(e.g. [claude-sonnet-4-6, gpt-5])")
        names = tuple(str_(m, f"{where}[{i}]") for i, m in enumerate(models))
        for i, name in enumerate(names):
            if any(c in name for c in "*?["):
                raise ConfigError(f"{where}[{i}]", f"must be a model name, not a pattern (got {name!r}): a fallback "
                                                   "is one model, tried as a client would ask for it")
            if name in names[:i]:
                raise ConfigError(f"{where}[{i}]", f"{name!r} is listed twice")
        chains.append((str(pattern), names))
    return tuple(chains)
