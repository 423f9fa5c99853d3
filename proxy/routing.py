"""Model routing: which upstreams serve a client's model name, and what they call it.

Owns the `models:` rules of each upstream (config keys `serve`, `aliases`, `renames`,
`prefixes`, with a `preset` table already merged in by the config): an exact alias or legacy
rename wins; otherwise the upstream serves the name if a
`serve` pattern matches, with the first matching prefix rule prepended (`claude-*` →
`anthropic/`). And the order the relay tries them in: config order while every upstream's `weight`
is 1; otherwise the first route is chosen by smooth weighted round robin (nginx's: each upstream's
running credit grows by its weight, the richest goes first and pays the total), so 3 : 1 sends
exactly three requests in four to the first — no randomness, so no run-to-run spread —, the others
follow in config order, and weight-0 upstreams come last. Per worker; each worker spreads its own
requests in the same proportions.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from proxy.config import Upstream


@dataclass(frozen=True)
class Route:
    upstream: Upstream
    model: str  # the name the upstream knows the model by


def upstream_model(upstream: Upstream, client_model: str) -> str | None:
    """The upstream's name for `client_model`, or None if this upstream does not serve it."""
    rules = upstream.models
    if client_model in rules.aliases:
        return rules.aliases[client_model]
    if client_model in rules.renames:
        return rules.renames[client_model]
    if not any(fnmatchcase(client_model, pattern) for pattern in rules.serve):
        return None
    for pattern, prefix in rules.prefixes.items():
        if fnmatchcase(client_model, pattern):
            return client_model if client_model.startswith(prefix) else prefix + client_model
    return client_model


class Router:
    def __init__(self, upstreams: tuple[Upstream, ...]) -> None:
        self.upstreams = upstreams
        self.weighted = any(u.weight != 1 for u in upstreams)
        # Per set of upstreams serving a model (bounded by the config, not by the model names asked
        # for): each upstream's running credit in the smooth weighted round robin.
        self._credit: dict[tuple[str, ...], list[float]] = {}

    def resolve(self, client_model: str) -> list[Route]:
        """Every route of `client_model`, in config order (what budgets size, what catalogs list)."""
        routes = []
        for upstream in self.upstreams:
            model = upstream_model(upstream, client_model)
            if model is not None:
                routes.append(Route(upstream, model))
        return routes

    def routes_to_try(self, client_model: str) -> list[Route]:
        """The routes of `client_model` in the order one request tries them: weighed when any upstream
        has a weight other than 1 (each call takes a turn: the relay's, once per request and model)."""
        routes = self.resolve(client_model)
        if self.weighted and len(routes) > 1:
            return self._weighed(routes)
        return routes

    def _weighed(self, routes: list[Route]) -> list[Route]:
        """`routes` with the one whose turn it is first, the rest in config order, weight 0 last."""
        live = [r for r in routes if r.upstream.weight > 0]
        spare = [r for r in routes if r.upstream.weight <= 0]
        if len(live) > 1:
            names = tuple(r.upstream.name for r in live)
            credit = self._credit.setdefault(names, [0.0] * len(live))
            total = 0.0
            for i, route in enumerate(live):
                credit[i] += route.upstream.weight
                total += route.upstream.weight
            first = max(range(len(live)), key=credit.__getitem__)  # ties: the earliest in config order
            credit[first] -= total
            live.insert(0, live.pop(first))
        return live + spare
