"""Prompt caching the proxy asks an Anthropic upstream for, when the request asks for none.

Owns the upstream's `prompt_cache:` mode applied to a Messages request body, after it is built
(passed through or translated): when the body carries no `cache_control` anywhere — top level,
system blocks, message content blocks (tool results' content too), tools — `auto` sets Anthropic's
automatic caching, the top-level `{"cache_control": {"type": "ephemeral"}}` (the API places the
breakpoint on the last cacheable block and moves it forward as the conversation grows);
`breakpoints`, for Anthropic-compatible servers that do not know the top-level field, marks the last
system block and the last cacheable block of the final message (a string becomes one text block;
thinking blocks and empty text cannot carry a breakpoint); `off` adds nothing. A body that carries
any `cache_control` is the client's to manage and is returned as it is — so the proxy never adds
to a client's breakpoints, and never goes past Anthropic's limit of 4 (it adds at most 2, to none).
Nothing is added where the upstream lists `cache_control` in `unsupported:`.
What counts is the body that goes to the upstream: a Messages client's markers are in it as they
were sent; a Chat or Responses client's `cache_control` on content parts is not carried to an
Anthropic upstream (docs/pairs.md), so such a request counts as asking for none.
The 5-minute TTL (Anthropic's default, the cheaper write) is the only one the proxy asks for.
Pure: never changes the body it is given (it may be the client's, reused by the next attempt).
"""

from __future__ import annotations

from typing import Any

from proxy.config import Upstream

FIELD = "cache_control"
EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # Anthropic refuses a request with more (the automatic one takes a slot too)
# Where a breakpoint may sit below the top level ("*": each element of a list); also where an
# upstream that does not take `cache_control` has it removed (`UpstreamSide.nested_fields`).
NESTED: tuple[tuple[str, ...], ...] = (("system", "*"), ("messages", "*", "content", "*"),
                                       ("messages", "*", "content", "*", "content", "*"), ("tools", "*"))
_UNCACHEABLE = ("thinking", "redacted_thinking")


def for_upstream(body: dict[str, Any], upstream: Upstream) -> dict[str, Any]:
    """`body` as it goes to `upstream`: marked for caching as its `prompt_cache` mode says, unless
    the upstream does not take `cache_control` or the body already carries some."""
    if FIELD in upstream.unsupported:
        return body
    return marked(body, upstream.prompt_cache)


def marked(body: dict[str, Any], mode: str) -> dict[str, Any]:
    """`body` with the proxy's breakpoints for `mode` (auto | breakpoints | off); the same object
    when it already carries `cache_control`, when the mode is `off`, or when nothing can be marked."""
    if mode == "off" or breakpoints(body):
        return body
    if mode == "auto":
        return {**body, FIELD: dict(EPHEMERAL)}
    changes: dict[str, Any] = {}
    system = _marked_system(body.get("system"))
    if system is not None:
        changes["system"] = system
    messages = body.get("messages")
    last = _marked_message(messages[-1]) if isinstance(messages, list) and messages else None
    if last is not None:
        changes["messages"] = [*messages[:-1], last]  # type: ignore[index]
    return {**body, **changes} if changes else body


def breakpoints(body: dict[str, Any]) -> int:
    """How many `cache_control` markers the body carries: the top-level one (automatic caching)
    and every block's."""
    count = int(body.get(FIELD) is not None)
    for path in NESTED:
        count += sum(1 for node in _at(body, path) if isinstance(node, dict) and node.get(FIELD) is not None)
    return count


def _at(node: Any, path: tuple[str, ...]) -> list[Any]:
    """The nodes `path` leads to ("*": each element of a list)."""
    if not path:
        return [node]
    head, rest = path[0], path[1:]
    if head == "*":
        return [found for item in node for found in _at(item, rest)] if isinstance(node, list) else []
    return _at(node[head], rest) if isinstance(node, dict) and head in node else []


def _marked_system(system: Any) -> list[Any] | None:
    if isinstance(system, str):
        return [{"type": "text", "text": system, FIELD: dict(EPHEMERAL)}] if system else None
    return _marked_blocks(system) if isinstance(system, list) else None


def _marked_message(message: Any) -> dict[str, Any] | None:
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return None
        return {**message, "content": [{"type": "text", "text": content, FIELD: dict(EPHEMERAL)}]}
    blocks = _marked_blocks(content) if isinstance(content, list) else None
    return None if blocks is None else {**message, "content": blocks}


def _marked_blocks(blocks: list[Any]) -> list[Any] | None:
    """The blocks with the last one that can carry a breakpoint marked; None if none can."""
    for i in range(len(blocks) - 1, -1, -1):
        block = blocks[i]
        if _cacheable(block):
            return [*blocks[:i], {**block, FIELD: dict(EPHEMERAL)}, *blocks[i + 1:]]
    return None


def _cacheable(block: Any) -> bool:
    if not isinstance(block, dict) or block.get("type") in _UNCACHEABLE:
        return False
    return block.get("type") != "text" or bool(block.get("text"))
