"""What a usage store keeps in memory while it cannot write: Redis away or failing over, the
state file's disk full or read-only.

Owns the buffer both stores share (proxy/ops/usage_store.py, proxy/ops/redis_usage_store.py):
rows merged by minute and dimensions — so it grows with the variety of traffic, not its volume —
up to `MAX_BUFFERED_ROWS` distinct rows, beyond which a row is dropped, its requests counted
(`overflow`) and logged; the recent-requests entries (the newest `RECENT_CAP`); the latest
retention purge asked for. And owns the batches taken out of it: each has a sequence number, one
after the other for the store that owns the buffer, so a networked store can make a batch's write
idempotent (the Redis script skips a sequence number it has applied). A batch whose write failed
goes back: merged into the buffer when it surely was not written (SQLite rolled it back), or kept
whole, with its number, when it may have been (Redis took it, then the connection broke before
the answer) — that batch is the next one taken, so a retry is recognised. Pure data: the stores
call it under their own serialisation (one writer at a time).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from proxy.ops.usage_store import RECENT_CAP, RecentEntry, UsageRow

log = logging.getLogger("proxy.usage")

MAX_BUFFERED_ROWS = 50_000  # distinct (minute, dimensions) rows kept while the store cannot write


@dataclass
class Batch:
    seq: int
    rows: list[UsageRow] = field(default_factory=list)
    recent: list[RecentEntry] = field(default_factory=list)
    purge_before: int | None = None


class UsageBuffer:
    def __init__(self, cap: int = MAX_BUFFERED_ROWS) -> None:
        self.cap = cap
        self._rows: dict[tuple[object, ...], UsageRow] = {}
        self._recent: deque[RecentEntry] = deque(maxlen=RECENT_CAP)
        self._purge_before: int | None = None
        self._in_doubt: Batch | None = None  # written or not, we cannot tell: retried as it is
        self._seq = 0
        self.overflow = 0  # requests whose usage was dropped because the buffer was full

    def __len__(self) -> int:
        doubt = self._in_doubt
        return len(self._rows) + len(self._recent) + (len(doubt.rows) + len(doubt.recent) if doubt else 0)

    def pending(self) -> bool:
        return bool(self._rows or self._recent or self._purge_before is not None or self._in_doubt)

    def put(self, usage: Sequence[UsageRow], recent: Sequence[RecentEntry], purge_before: int | None = None) -> None:
        dropped = 0
        in_doubt = len(self._in_doubt.rows) if self._in_doubt else 0  # counts toward the cap, and cannot merge
        for row in usage:
            kept = self._rows.get(row.key())
            if kept is not None:
                kept.add(row)
            elif len(self._rows) + in_doubt < self.cap:
                self._rows[row.key()] = UsageRow(*row.values())  # a copy: merging must not change the caller's
            else:
                dropped += row.requests
        self._recent.extend(recent)
        if purge_before is not None:
            self._purge_before = max(purge_before, self._purge_before or purge_before)
        if dropped:
            self.overflow += dropped
            log.error("usage: the buffer kept while the state store cannot be written is full (%d rows); %d "
                      "requests' usage dropped (%d so far)", self.cap, dropped, self.overflow)

    def take(self) -> Batch | None:
        """The next batch to write: one whose write is in doubt first, else everything buffered."""
        if self._in_doubt is not None:
            batch, self._in_doubt = self._in_doubt, None
            return batch
        if not (self._rows or self._recent or self._purge_before is not None):
            return None
        self._seq += 1
        batch = Batch(self._seq, list(self._rows.values()), list(self._recent), self._purge_before)
        self._rows, self._recent, self._purge_before = {}, deque(maxlen=RECENT_CAP), None
        return batch

    def put_back(self, batch: Batch, in_doubt: bool) -> None:
        """`batch` was not written (`in_doubt` False: merged back), or may have been (kept whole, next)."""
        if in_doubt:
            self._in_doubt = batch
        else:
            self.put(batch.rows, batch.recent, batch.purge_before)
