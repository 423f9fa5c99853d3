"""Conversation affinity, the relay's side: which account a request should go to first, and
remembering which one served it.

Owns the decision for one request and one route: when the upstream's `pool.affinity` is on, the
conversation is named by the upstream's `pool.affinity_header` if the client sent it, else by what
the client's protocol says names it (`ClientSide.affinity_key`: Claude Code's session header or
`metadata.user_id`, `prompt_cache_key`, `user`); the account remembered for it is preferred — the
pool leases it only if it is in rotation, untried and below max_concurrency, else chooses as
usual — and a Responses turn with no such name goes back to the account that answered its
`previous_response_id`. Once an attempt has answered, its account is remembered when it is not
the one remembered already (a new conversation, or one moved because its account was cooling).

Prompt caches live per upstream account: a conversation that stays on one account pays for its
prefix once. Remembering never fails a request: a store that errs is logged (once per outage) and
the next of the chain stands in (proxy/state/fallback.py: Redis, the state file, the worker's
memory); a lookup that finds nothing leaves the choice to the pool.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from proxy.config import Upstream
from proxy.pool.affinity import AffinityStore, MemoryAffinity, NotNow
from proxy.protocols import registry
from proxy.protocols.exchange import Exchange
from proxy.state.fallback import Fallback, reaches
from proxy.upstream.keeper import call_store

log = logging.getLogger("proxy.affinity")

T = TypeVar("T")


class Affinity:
    def __init__(self, local: AffinityStore | None = None, shared: AffinityStore | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`shared` (Redis) first, then `local` (the state file), then this worker's memory."""
        chain = reaches(shared, local, MemoryAffinity(), "conversations are kept on their accounts")
        self.clock = clock
        # Each call says how it runs (`_get`: at once when the store can, else on a thread).
        self._stores: Fallback[AffinityStore] = Fallback(chain, log=log, clock=clock)

    def conversation(self, ex: Exchange, upstream: Upstream) -> str | None:
        """What names the request's conversation, for this upstream (None: affinity off, or unnamed)."""
        settings = upstream.pool
        if not settings.affinity:
            return None
        if settings.affinity_header:
            named = ex.request_headers.get(settings.affinity_header)
            if named:
                return f"header:{named}"
        return registry.get(ex.protocol).client.affinity_key(ex.body, ex.request_headers)

    def preferred(self, ex: Exchange, upstream: Upstream, conversation: str | None) -> str | None:
        """The account to try first for this request on `upstream`, if its conversation has one."""
        if not upstream.pool.affinity:
            return None
        account = None
        if conversation is not None:
            ttl = upstream.pool.affinity_ttl
            account = self._call(lambda store: _get(store, upstream.name, conversation, ttl))
        if account is None and ex.conversation is not None:
            account = ex.conversation.previous_account(upstream.name)
        return account

    def served(self, upstream: Upstream, conversation: str | None, account: str, preferred: str | None) -> None:
        """`account` answered the request: remember it for the conversation's next turn."""
        if conversation is None or account == preferred:
            return
        ttl = upstream.pool.affinity_ttl
        self._call(lambda store: call_store(store, lambda: store.put(upstream.name, conversation, account, ttl)))

    def _call(self, op: Callable[[AffinityStore], T]) -> T | None:
        try:
            return self._stores.call(op)[1]
        except Exception:
            log.exception("affinity: the state store failed; the pool chooses the account")
            return None


def _get(store: AffinityStore, upstream: str, conversation: str, ttl: float) -> str | None:
    """The store's `get`: at once on this greenlet when the store can answer so, else as its other
    calls run (on a thread, for a store that blocks)."""
    try:
        return store.get_at_once(upstream, conversation, ttl)
    except NotNow:
        return call_store(store, lambda: store.get(upstream, conversation, ttl))
