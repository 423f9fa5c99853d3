"""Client authentication: which header carries the key, and a constant-time check against the
configured keys.

Owns the rule that `x-api-key` and `Authorization: Bearer` are both accepted (the Anthropic SDK
sends Bearer, Claude Code and Vercel send x-api-key; x-api-key wins when both are present) and
that comparing keys takes the same time whether or not, and wherever, they differ; and which
configured key (its name, its `models`, whether it is disabled — proxy.config.keys) a request
presented.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from proxy.config.keys import ClientKey, derived_name
from proxy.errors import ProxyError


def presented_key(x_api_key: str | None, authorization: str | None) -> str | None:
    """The key from the `x-api-key` header or, failing that, from `Authorization: Bearer`."""
    if x_api_key and x_api_key.strip():
        return x_api_key.strip()
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def key_name(key: str) -> str:
    """The name a key is shown by where it has none of its own (logs, usage, metrics): stable, and
    no use for finding the key — a short prefix of its SHA-256."""
    return derived_name(key)


class KeyChecker:
    """Compares digests, so neither the key's length nor its content shows in the timing, and
    always compares against every key. Plain strings (admin keys, older configs) are keys named
    by `key_name`."""

    def __init__(self, keys: Iterable[str | ClientKey]) -> None:
        entries = [k if isinstance(k, ClientKey) else ClientKey.plain(k) for k in keys]
        self._entries = [(hashlib.sha256(k.key.encode()).digest(), k) for k in entries]

    @property
    def empty(self) -> bool:
        return not self._entries

    def match(self, key: str | None) -> ClientKey | None:
        """The configured key equal to `key` (disabled or not), or None. Every key is compared,
        whichever matches, so the time taken says nothing about which one did or how many there are."""
        candidate = hashlib.sha256((key or "").encode()).digest()
        found = None
        for digest, entry in self._entries:
            if hmac.compare_digest(candidate, digest):
                found = entry
        return found if key is not None else None

    def check(self, key: str | None) -> bool:
        """True for a configured key that is not disabled."""
        found = self.match(key)
        return found is not None and not found.disabled


def check_model(entry: ClientKey | None, model: str) -> None:
    """A 403 unless the key's `models` allow `model` — in every protocol's words: Messages clients
    read `permission_error`, OpenAI clients the code `model_not_allowed`. Names the model and the
    key's name and patterns (what the holder needs to choose another model), never the key."""
    if entry is None or entry.allows(model):
        return
    allowed = ", ".join(entry.models or ())
    raise ProxyError(403, f"The API key {entry.name!r} may not use the model {model!r}: the proxy's config "
                          f"allows it only models matching {allowed}.", "permission",
                     code="model_not_allowed", param="model")
