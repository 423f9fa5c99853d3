"""Where conversation affinity is remembered: which account of an upstream served a conversation's
last turn — the `AffinityStore` interface, in memory (`state_path: null`: one worker), in the
`state_path` SQLite file (the host's workers) and in Redis (`state: {backend: redis}`: every host).

Owns remembering, not deciding: the relay asks for the account (proxy/relay/affinity.py) and the
pool leases it if it is in rotation with room (proxy/pool/pool.py). Conversations are stored under
a digest of what names them (a session id, a user id, a cache key: none of it is kept as sent),
per upstream, and expire `pool.affinity_ttl` seconds after their last turn — each turn that reads
an entry extends it.
The SQLite store blocks (`blocking` is True: callers run it on a thread); Redis' sockets are
cooperative under gevent. Pure of Flask, requests and gevent.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from proxy.config.state import StateConfig
from proxy.state import sqlite
from proxy.state.redis_connection import connect, key
from proxy.state.schema import is_locked

if TYPE_CHECKING:
    import redis

MEMORY_ENTRIES = 100_000  # conversations one worker remembers at most (the oldest go first)
PURGE_EVERY = 600.0  # seconds between two sweeps of expired rows from the SQLite table
IDLE_CONNECTIONS = 8  # connections the SQLite store keeps open between operations, at most
_LOOKUP = "SELECT account, expires FROM conversation_affinity WHERE upstream=? AND conversation=? AND expires>?"


def digest(conversation: str) -> str:
    return hashlib.sha256(conversation.encode()).hexdigest()[:32]


class AffinityStore(Protocol):
    blocking: bool

    def get(self, upstream: str, conversation: str, ttl: float) -> str | None:
        """The account that served the conversation last, if remembered (its expiry extended to `ttl`)."""

    def get_at_once(self, upstream: str, conversation: str, ttl: float) -> str | None:
        """`get` on the caller's greenlet, or `NotNow` when it would block there (the caller then
        makes `get` the way the store's calls are made: on a thread, for one that blocks). A store
        that never blocks answers with `get` itself."""

    def put(self, upstream: str, conversation: str, account: str, ttl: float) -> None:
        """Remember that `account` served the conversation's latest turn."""


class NotNow(Exception):
    """A store's at-once call cannot answer without waiting or writing: make the call on a thread."""


class MemoryAffinity:
    blocking = False

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()

    def get(self, upstream: str, conversation: str, ttl: float) -> str | None:
        now = self._clock()
        with self._lock:
            entry = self._entries.get((upstream, digest(conversation)))
            if entry is None or entry[1] <= now:
                return None
            self._entries[(upstream, digest(conversation))] = (entry[0], now + ttl)
            self._entries.move_to_end((upstream, digest(conversation)))
            return entry[0]

    get_at_once = get  # never blocks

    def put(self, upstream: str, conversation: str, account: str, ttl: float) -> None:
        with self._lock:
            self._entries[(upstream, digest(conversation))] = (account, self._clock() + ttl)
            self._entries.move_to_end((upstream, digest(conversation)))
            while len(self._entries) > MEMORY_ENTRIES:
                self._entries.popitem(last=False)


class SQLiteAffinity:
    """Every turn of a named conversation reads here (Claude Code, Codex, gemini-cli all name
    theirs), so connections are kept between operations: opening one per operation, as the state
    file's other stores do, cost ~0.5 ms a turn, the query itself ~10 µs. One connection per
    operation running at once (calls run on the worker's pool threads), back to the idle list once
    it ends cleanly; one an error went through is closed."""

    blocking = True

    def __init__(self, state_file: sqlite.StateFile, clock: Callable[[], float] = time.time) -> None:
        self.file = state_file
        self._clock = clock
        self._next_purge = 0.0
        self._idle: list[sqlite3.Connection] = []  # append and pop are atomic: no lock between threads
        self._at_once: sqlite3.Connection | None = None  # `get_at_once`'s, on the worker's own thread

    @contextlib.contextmanager
    def _session(self) -> Iterator[sqlite3.Connection]:
        try:
            db = self._idle.pop()
        except IndexError:
            db = self.file.connect()
        try:
            yield db
        except BaseException:
            db.close()
            raise
        if db.in_transaction or len(self._idle) >= IDLE_CONNECTIONS:
            db.close()
        else:
            self._idle.append(db)

    def get_at_once(self, upstream: str, conversation: str, ttl: float) -> str | None:
        """`get` on the caller's greenlet, when it needs neither a wait nor a write: the read never
        waits for a lock (busy timeout 0, and a WAL read takes none another process holds for
        long), and an entry due for its extension, or a file busy right now, is `NotNow` — the
        caller then runs `get` on a thread. Saves the thread's round trip on nearly every turn."""
        if self._at_once is None:
            self._at_once = self.file.connect(busy_timeout=0)
        now = self._clock()
        try:
            row = self._at_once.execute(_LOOKUP, (upstream, digest(conversation), now)).fetchone()
        except sqlite3.OperationalError as exc:
            if is_locked(exc):
                raise NotNow from None
            self._at_once.close()  # as `_session` does with a connection an error went through
            self._at_once = None
            raise
        if row is None:
            return None
        if row[1] < now + ttl / 2:
            raise NotNow
        return str(row[0])

    def get(self, upstream: str, conversation: str, ttl: float) -> str | None:
        now = self._clock()
        with self._session() as db:
            row = db.execute(_LOOKUP, (upstream, digest(conversation), now)).fetchone()
            if row is None:
                return None
            if row[1] < now + ttl / 2:  # extended at most every half TTL: most turns only read
                db.execute("UPDATE conversation_affinity SET expires=? WHERE upstream=? AND conversation=?",
                           (now + ttl, upstream, digest(conversation)))
            return str(row[0])

    def put(self, upstream: str, conversation: str, account: str, ttl: float) -> None:
        now = self._clock()
        with self._session() as db:
            db.execute("INSERT OR REPLACE INTO conversation_affinity (upstream, conversation, account, expires) "
                       "VALUES (?, ?, ?, ?)", (upstream, digest(conversation), account, now + ttl))
            if now >= self._next_purge:
                self._next_purge = now + PURGE_EVERY
                db.execute("DELETE FROM conversation_affinity WHERE expires<=?", (now,))


class RedisAffinity:
    """`<prefix>affinity:<upstream>:<digest>` → the account id, with the TTL as Redis' own expiry."""

    blocking = False

    def __init__(self, state: StateConfig, client: redis.Redis | None = None) -> None:
        self.state = state
        self.client = client if client is not None else connect(state)

    def get(self, upstream: str, conversation: str, ttl: float) -> str | None:
        value = self.client.getex(key(self.state, "affinity", upstream, digest(conversation)), ex=max(1, int(ttl)))
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    get_at_once = get  # cooperative under gevent: never blocks the worker

    def put(self, upstream: str, conversation: str, account: str, ttl: float) -> None:
        self.client.set(key(self.state, "affinity", upstream, digest(conversation)), account, ex=max(1, int(ttl)))
