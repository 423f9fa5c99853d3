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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.ir.response import Usage

# The outcome of a request that was answered: "ok"; a client that left mid-answer: "client_gone";
# otherwise the error kind the client was answered with (proxy.errors.KIND_STATUS), or the pool's
# failure class of the last attempt when the upstream failed.
OK = "ok"
CLIENT_GONE = "client_gone"


@dataclass(slots=True)
class Arrival:
    """A request as it arrived, for the concerns that watch a request from its start (the request
    log, tracing: `Hooks.request_arrived`). `body` gives the raw body once it has been read (b""
    before); `key` is the key the client presented, held only so that what is kept can be scrubbed
    of it — never stored, never logged."""

    method: str
    path: str
    query: str  # the query string as sent (a `?key=` in it is a secret: whoever keeps it removes it)
    headers: Mapping[str, str]  # names in lower case
    body: Callable[[], bytes]
    key: str | None = None


@dataclass(slots=True)
class AttemptStart:
    """An attempt about to be sent: what the request log keeps of it and what tracing names its span by."""

    number: int  # 1 for the request's first attempt
    upstream: str
    upstream_protocol: str
    server: str  # the upstream's base URL
    account: str
    upstream_model: str
    path: str
    body: bytes
    started: float = field(default_factory=time.time)


class Capture(Protocol):
    """The request log's tap on one request (proxy.ops.request_log), set on the record by its hook
    when the request is to be logged. Called on the request's own greenlet; the chunk and frame
    calls are on a stream's hot path, so they only keep references."""

    def attempt_started(self, start: AttemptStart) -> None: ...
    def upstream_answer(self, status: int, raw: bytes) -> None: ...  # an error body, or a whole answer
    def upstream_chunk(self, data: bytes) -> None: ...  # a stream's raw bytes, as read
    def client_frames(self, frames: list[bytes]) -> None: ...  # a stream's frames, as written
    def client_answer(self, status: int, headers: Mapping[str, str], body: bytes | None) -> None: ...


class Trace(Protocol):
    """Tracing's hold on one request (proxy.ops.tracing), set on the record by its hook: the headers
    that carry an attempt's trace context to the upstream."""

    def attempt_started(self, start: AttemptStart) -> Mapping[str, str]: ...


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
    number: int = 1  # which of the request's attempts this was


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    client_key: str  # the key's name, never the key
    client_protocol: str
    model: str  # as the client asked for it
    stream: bool
    client_address: str | None = None  # REMOTE_ADDR as the access log shows it (proxy/serving/forwarded.py)
    # What the client called: its protocol's completion endpoint by the protocol's name
    # (chat_completions, messages, responses, gemini), or embeddings, responses_compact.
    endpoint: str = ""
    # The client model name that answered when a fallback did (`fallbacks:`); None: `model` itself.
    served_model: str | None = None
    started: float = field(default_factory=time.time)  # wall clock, for accounting by the minute
    started_mono: float = field(default_factory=time.monotonic)
    upstream: str | None = None  # where the last attempt went
    account: str | None = None
    upstream_model: str | None = None
    status: int = 0  # what the client got (200 for a stream that started, whatever came in-band)
    outcome: str = OK
    usage: Usage | None = None
    # What it cost, set by the first hook (proxy.money.costing) before any other hears of the end:
    # integer micro-dollars, None when the price is unknown or there was no usage; the table the
    # price came from ("genai-prices 0.2.3", "config", "config + genai-prices 0.2.3"); what its
    # cache reads saved (micro-dollars, None like the cost).
    cost_micros: int | None = None
    price_source: str | None = None
    cache_saved_micros: int | None = None
    first_byte_s: float | None = None  # from arrival to the first byte of the answer
    duration_s: float | None = None
    attempts: int = 0
    done: bool = False
    # What the answer said of itself, for traces: its id, the model that produced it (as the
    # upstream named it), why it finished (in the IR's words); the conversation affinity keyed it by.
    response_id: str | None = None
    response_model: str | None = None
    finish_reason: str | None = None
    conversation_id: str | None = None
    # The client's request in the IR, decoded when first asked (tracing reads its sampling settings).
    decoded: Callable[[], Any] | None = None
    capture: Capture | None = None  # set when the request log keeps this request
    trace: Trace | None = None  # set when tracing follows this request

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
