"""Model fallbacks: whether the way a model failed is one another model could fix, and which model
is tried next (`fallbacks:`, `context_window_fallbacks:`; docs/architecture.md §5.8).

Owns the classes that call for a fallback: every route of the model ended without an answer (every
account exhausted, rate-limited, disabled, busy; the upstream unreachable or overloaded) — `unserved`;
the upstream refused the model as unknown (404) or overloaded (503, 529) — `refused`; it refused the
prompt as too long for the model (`request_too_large`) — `too_long`, which only
`context_window_fallbacks` answers. Never a failure the client caused (a 400), a key's limit or
budget (refused before the relay), a client that hung up, or a stream's first-byte deadline spent
(there is no time left to try another). Which fallbacks a request may take at all — its key's
models, the cost ratio, its budget — is the edge's `FallbackGate`; the cap on every upstream call
(`max_attempts_total`) is the loop's. Must not send anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from proxy.config.fallbacks import FallbackSettings
from proxy.errors import ProxyError

UNSERVED, REFUSED, TOO_LONG = "unserved", "refused", "too_long"

# Given a fallback model and its routes: None if the request may take it, else why not (for the log).
FallbackGate = Callable[[str, Sequence[Any]], "str | None"]


class ModelFailed(Exception):
    """No route of one model answered: `error` is what the client is told if no fallback does
    better; `reason` says why another model might (UNSERVED, REFUSED, TOO_LONG), None if none can."""

    def __init__(self, error: ProxyError, reason: str | None) -> None:
        super().__init__(error.info.message)
        self.error, self.reason = error, reason


def reason_for(err: ProxyError, klass: str | None) -> str | None:
    """Why the failure an attempt ended its model with (the `fail` action) may be fixed by another model."""
    if klass == "request_too_large":
        return TOO_LONG
    if klass is not None and err.info.status in (404, 503, 529) and err.info.kind != "invalid_request":
        return REFUSED
    return None


class Walk:
    """The models one request tries, starting with the one it asked for: each fallback once, in the
    order the config lists it for the requested model."""

    __slots__ = ("requested", "settings", "tried")

    def __init__(self, settings: FallbackSettings, requested: str) -> None:
        self.settings, self.requested = settings, requested
        self.tried = [requested]

    def candidates(self, reason: str) -> list[str]:
        """The fallbacks not yet tried for a model that failed for `reason`, in order."""
        listed = self.settings.for_model(self.requested, too_long=reason == TOO_LONG)
        return [m for m in listed if m not in self.tried]
