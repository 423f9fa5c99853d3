"""The demo upstream's prompt cache, per account: for Chat requests that ask for it (`[demo:cache]`),
and for Messages requests that carry `cache_control`, as Anthropic's does.

Owns what a real provider's prompt cache does that a proxy's routing can win or lose: it lives per
account (per API key), and a request whose leading part that account has already seen reports it
as cached — a conversation that hops to another account pays for its whole prefix again. Chat
prefixes are compared whole message by whole message and reported as
`prompt_tokens_details.cached_tokens`. Messages requests are cached the way Anthropic caches them
(`anthropic`): the prefix — tools, system blocks, then message blocks — is written up to each
breakpoint (a block's `cache_control`, or the last cacheable block for the top-level
`cache_control` of automatic caching) once it is at least `MIN_CACHEABLE_TOKENS` long, and read
back at the longest block boundary already written (the demo looks back without Anthropic's limit
of 20 blocks); the answer reports `cache_read_input_tokens`, `cache_creation_input_tokens` and
the rest as `input_tokens`. Tokens are counted the way the demo counts prompt tokens (a quarter of
the JSON's length). Bounded: the oldest prefixes are forgotten first.
Pure: no Flask, requests or gevent.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from typing import Any

MAX_PREFIXES = 20_000  # across every account
MIN_CACHEABLE_TOKENS = 1024  # Anthropic caches no shorter prefix (Sonnet's minimum; some models' is larger)
_UNCACHEABLE = ("thinking", "redacted_thinking")


class PromptCache:
    def __init__(self) -> None:
        # (account key, prefix digest); ("anthropic", account key, prefix digest) for Messages prefixes
        self._seen: OrderedDict[tuple[str, ...], None] = OrderedDict()
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

    def anthropic(self, key: str, body: dict[str, Any], input_tokens: int) -> tuple[int, int]:
        """(cache read, cache write) tokens of a Messages request on this key's cache, within its
        `input_tokens`; then remember the prefixes it wrote. (0, 0) for a request with no breakpoint."""
        blocks = _anthropic_blocks(body)
        marks = [i for i, (_, cacheable, marked) in enumerate(blocks) if marked and cacheable]
        if body.get("cache_control") is not None:  # automatic caching: the last cacheable block
            marks += [i for i, (_, cacheable, _) in enumerate(blocks) if cacheable][-1:]
        if not marks:
            return 0, 0
        digest, tokens, prefixes = hashlib.sha256(), 0, []
        for text, _, _ in blocks[:max(marks) + 1]:
            digest.update(text.encode())
            tokens += math.ceil(len(text) / 4)
            prefixes.append((("anthropic", key, digest.copy().hexdigest()), tokens))
        with self._lock:
            read = max((n for prefix, n in prefixes if prefix in self._seen), default=0)
            last, last_tokens = prefixes[max(marks)]
            write = last_tokens - read if last_tokens >= MIN_CACHEABLE_TOKENS and last not in self._seen else 0
            for i in marks:
                prefix, n = prefixes[i]
                if n >= MIN_CACHEABLE_TOKENS:
                    self._seen[prefix] = None
                    self._seen.move_to_end(prefix)
            while len(self._seen) > MAX_PREFIXES:
                self._seen.popitem(last=False)
        read = min(read, input_tokens)
        return read, max(0, min(write, input_tokens - read))


def _anthropic_blocks(body: dict[str, Any]) -> list[tuple[str, bool, bool]]:
    """A Messages request in cache order — tools, system blocks, message blocks — as (the block's
    JSON without its marker, whether it can carry a breakpoint, whether it carries one)."""
    out: list[tuple[str, bool, bool]] = []

    def add(where: str, block: Any) -> None:
        if isinstance(block, str):
            block = {"type": "text", "text": block}
        if not isinstance(block, dict):
            return
        bare = {k: v for k, v in block.items() if k != "cache_control"}
        cacheable = block.get("type") not in _UNCACHEABLE and (block.get("type") != "text" or bool(block.get("text")))
        out.append((where + json.dumps(bare, sort_keys=True), cacheable, block.get("cache_control") is not None))

    for tool in body.get("tools") or ():
        add("tool:", tool)
    system = body.get("system")
    for block in [system] if isinstance(system, str) and system else system if isinstance(system, list) else ():
        add("system:", block)
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        role = str(message.get("role")) + ":" if isinstance(message, dict) else ":"
        for block in [content] if isinstance(content, str) else content if isinstance(content, list) else ():
            add(role, block)
    return out
