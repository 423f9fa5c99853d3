"""The demo upstream's prompt cache, per account, for requests that ask for it (`[demo:cache]`).

Owns what a real provider's prompt cache does that a proxy's routing can win or lose: it lives per
account (per API key), and a request whose leading messages that account has already seen reports
them as cached (`prompt_tokens_details.cached_tokens`) — a conversation that hops to another
account pays for its whole prefix again. Prefixes are compared whole message by whole message, and
tokens counted the way the demo counts prompt tokens (a quarter of the JSON's length). Bounded: the
oldest prefixes are forgotten first.
Pure: no Flask, requests or gevent.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

MAX_PREFIXES = 20_000  # across every account


class PromptCache:
    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()  # (account key, prefix digest)
        self._lock = threading.Lock()

    def cached_tokens(self, key: str, messages: list[Any]) -> int:
        """The tokens of the longest prefix of `messages` this key has seen; then remember them all."""
        digest = hashlib.sha256()
        prefixes: list[tuple[str, int]] = []
        for i, message in enumerate(messages):
            digest.update(json.dumps(message, sort_keys=True).encode())
            prefixes.append((digest.copy().hexdigest(), len(json.dumps(messages[:i + 1])) // 4))
        with self._lock:
            cached = 0
            for prefix, tokens in prefixes:
                if (key, prefix) in self._seen:
                    cached = tokens
                    self._seen.move_to_end((key, prefix))
                else:
                    self._seen[(key, prefix)] = None
            while len(self._seen) > MAX_PREFIXES:
                self._seen.popitem(last=False)
        return cached
