"""What the proxy knows about one request when it ends, and about each attempt on the way.

Owns the records the hooks receive. The HTTP edge opens a `RequestRecord` when a client's request
arrives (who, which protocol, which model, streaming or not); the relay fills in where it went
(upstream, account, the upstream's name for the model), what it cost (the upstream's usage) and
when the first byte went out; whoever ends the request — the edge for an answer or an error, the
streaming engine when a stream closes — sets the outcome and hands it to the hooks once.
Pure data: must not import Flask, requests or gevent. Never holds a key: `client_key` is the key's
name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from proxy.ir.response import Usage

# The outcome of a request that was answered: "ok"; a client that left mid-answer: "client_gone";
# otherwise the error kind the client was answered with (proxy.errors.KIND_STATUS), or the pool's
# failure class of the last attempt when the upstream failed.
OK = "ok"
CLIENT_GONE = "client_gone"


@dataclass(slots=True)
class AttemptRecord:
    request_id: str
    upstream: str
    account: str
    status: int | None  # the upstream's HTTP status; None when there was no answer (network, proxy, timeout)
    klass: str  # "ok" or the pool's failure class (proxy.pool.classify)
    action: str  # what was done about it (retry on the next account, cool, disable, fail, stream, return)
    elapsed_s: float
    request: RequestRecord | None = None  # the request this attempt serves (who asked, for which model)
    dropped: dict[str, int] | None = None  # what the client's encoder had left out by then (reasoning: 2)
    upstream_model: str | None = None  # the model name the upstream was asked for


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    client_key: str  # the key's name, never the key
    client_protocol: str
    model: str  # as the client asked for it
    stream: bool
    client_address: str | None = None  # REMOTE_ADDR as the access log shows it (proxy/serving/forwarded.py)
    started: float = field(default_factory=time.time)  # wall clock, for accounting by the minute
    started_mono: float = field(default_factory=time.monotonic)
    upstream: str | None = None  # where the last attempt went
    account: str | None = None
    upstream_model: str | None = None
    status: int = 0  # what the client got (200 for a stream that started, whatever came in-band)
    outcome: str = OK
    usage: Usage | None = None
    cost_micros: int | None = None  # what the usage cost (proxy.money.cost); None: no usage, or no price
    first_byte_s: float | None = None  # from arrival to the first byte of the answer
    duration_s: float | None = None
    attempts: int = 0
    done: bool = False

    def attempted(self, attempt: AttemptRecord) -> None:
        """One more attempt, and where it went (the request shows where its latest went)."""
        self.upstream, self.account, self.upstream_model = attempt.upstream, attempt.account, attempt.upstream_model
        self.attempts += 1

    def first_byte(self) -> None:
        """The first byte of the answer is going out now (the first time this is said)."""
        if self.first_byte_s is None:
            self.first_byte_s = time.monotonic() - self.started_mono

    def finish(self, status: int, outcome: str, usage: Usage | None = None) -> bool:
        """Close the record; False if it was closed already (a request ends once)."""
        if self.done:
            return False
        self.done = True
        self.status, self.outcome = status, outcome
        if usage is not None:
            self.usage = usage
        self.duration_s = time.monotonic() - self.started_mono
        if self.first_byte_s is None and status < 400:
            self.first_byte_s = self.duration_s
        return True
