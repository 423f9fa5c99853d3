"""The retry loop every completion request goes through: routes in config order, accounts per route.

Owns the order of attempts and when to stop: resolving the client's model to routes (404 when no
upstream serves it), leasing an account of the route's pool for each attempt (never one this
request already tried, at most `pool.max_attempts` per route), bounding a stream's wait for its
first byte across all attempts (`timeouts.first_byte_total`), the account a conversation's turn
tries first (proxy.relay.affinity), and what the client is told when no
attempt gave an answer: the upstream's own error when every account failed without being taken
out of rotation, a 504 that says what was tried when time ran out, a 429 when every account that
could serve is rate-limited or cooling, else a 503 that says why no account is available; both say
when the next one returns (`Retry-After`). A client that hangs up
before its answer begins ends the loop (499 in the log, the lease released).

Must not build bodies, judge statuses or read answers (one attempt is `proxy.relay.attempt`'s),
nor touch the network (`proxy.relay.transport`). Returns a neutral `RelayResult`; the blueprint
makes the HTTP response.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.config import Config
from proxy.errors import ProxyError
from proxy.ir.response import Usage
from proxy.ops.hooks import Hooks, HookSet
from proxy.ops.records import OK, RequestRecord
from proxy.pool.pool import AccountPool
from proxy.protocols import registry
from proxy.protocols.exchange import EMBEDDINGS, Exchange
from proxy.relay.affinity import Affinity
from proxy.relay.attempt import Attempt, AttemptKit, DecodedOnce, NextAccount, RelayResult
from proxy.relay.fallbacks import UNSERVED, FallbackGate, ModelFailed, Walk, reason_for
from proxy.relay.first_byte import FirstByteBudget, all_timed_out_message, out_of_time_message
from proxy.relay.transport import Transport
from proxy.relay.unsupported_fields import UnsupportedFields
from proxy.routing import Route, Router
from proxy.streaming import ClientGone, hangup_aborts

log = logging.getLogger("proxy.relay")

# RelayResult is defined beside the attempt that builds it; callers of the loop take it from here.
__all__ = ["MODEL_HEADER", "Relay", "RelayResult", "able_routes"]

MODEL_HEADER = "x-llm-proxy-model"  # the client model name that answered: the one asked for, or a fallback


class _CloseRecord:
    """Closes a streamed request's record when its stream closes, and tells the hooks (the loop's
    `StreamEnded`). A slotted object rather than a closure over the record and the hooks: every open
    stream holds it, and a closure with its cells costs several times its 48 bytes."""

    __slots__ = ("hooks", "record")

    def __init__(self, record: RequestRecord, hooks: Hooks) -> None:
        self.record, self.hooks = record, hooks

    def __call__(self, usage: Usage | None, failure: str | None, answer: Any = None) -> None:
        record = self.record
        if answer is not None and not record.done:  # for traces: what the streamed answer said of itself
            record.response_id, record.response_model = answer.response_id, answer.response_model
            record.finish_reason = answer.finish_reason
        if record.finish(200, failure or OK, usage):
            self.hooks.stream_closed(record)
            self.hooks.request_done(record)


def able_routes(operation: str, routes: list[Route]) -> list[Route]:
    """Those of `routes` that can serve `operation`: for embeddings, the upstreams whose protocol
    has them (what the relay tries, and what the edge sizes a budget over)."""
    if operation != EMBEDDINGS:
        return routes
    return [r for r in routes if registry.get(r.upstream.protocol).embeddings is not None]


@dataclass
class _Run:
    """What one request's attempts share, across its routes and fallback models: the first-byte
    budget, the attempt kit, the IR decoded once, its record and stream-end callback, and the count
    of upstream calls made against `max_attempts_total` (`cap`)."""

    budget: FirstByteBudget
    kit: AttemptKit
    decoded: DecodedOnce
    record: RequestRecord | None
    stream_ended: _CloseRecord | None
    cap: int
    calls: int = 0


@dataclass
class Relay:
    config: Config
    router: Router
    pools: dict[str, AccountPool]
    transport: Transport  # every call to an upstream goes through it (HTTPTransport in the service)
    secrets: tuple[str, ...] = field(default=())  # the accounts' keys, scrubbed from what upstreams say
    unsupported: UnsupportedFields = field(default_factory=UnsupportedFields)
    clock: Callable[[], float] = time.monotonic  # for the first-byte deadline and the elapsed times logged
    hooks: Hooks = field(default_factory=HookSet)  # told of every attempt and every stream (proxy.ops)
    affinity: Affinity | None = None  # conversations kept on the account of their last turn

    def handle(self, ex: Exchange, record: RequestRecord | None = None,
               gate: FallbackGate | None = None) -> RelayResult:
        """The client's answer to `ex`, or a ProxyError. `record` is filled in here, from what each
        attempt returns or raises and the `AttemptRecord` it told the hooks (where the request went,
        what it cost, when its first byte left) — attempts never write it; a stream's record is
        closed, and the hooks told, when the stream ends — the caller closes the others. `gate`:
        which fallback models this request may take (its key's, its budget's; §5.8) — without one,
        none."""
        routes = self._routes(ex, ex.model)
        # Only a stream's wait is bounded across attempts: a non-streamed answer's first byte is
        # the whole answer, which may take as long as the generation (each attempt has `read`).
        budget = FirstByteBudget(self.config.timeouts.first_byte_total if ex.stream else None, self.clock)
        kit = AttemptKit(self.transport, self.pools, self.clock, self.hooks, self.secrets, self.unsupported,
                         self.config.streaming, self.config.max_response_bytes)
        # Told when a stream this request began closes (held by the stream: an object, not a closure).
        run = _Run(budget, kit, DecodedOnce(), record, _CloseRecord(record, self.hooks) if record is not None else None,
                   self.config.fallbacks.max_attempts_total)
        walk = Walk(self.config.fallbacks, ex.model)
        first: ModelFailed | None = None  # the requested model's failure: what the client is told
        fallen: list[str] = []  # each fallback that failed too, as the message names it
        while True:
            try:
                result = self._serve(ex, routes, run)
            except ModelFailed as failed:
                if first is None:
                    first = failed
                else:
                    fallen.append(f"{ex.model!r} (HTTP {failed.error.info.status})")
                taken = None
                if failed.reason is not None and gate is not None and run.calls < run.cap:
                    taken = self._fallback(ex, walk, failed, gate)
                if taken is None:
                    raise self._finally_unserved(first.error, fallen, run) from None
                ex, routes = taken
                continue
            result.headers[MODEL_HEADER] = ex.model
            if record is not None and ex.model != walk.requested:
                record.served_model = ex.model
            return result

    def _finally_unserved(self, error: ProxyError, fallen: list[str], run: _Run) -> ProxyError:
        """The requested model's failure — its status and Retry-After are what the client should act
        on — saying which fallbacks failed too and when the cap on upstream calls stopped it."""
        if fallen:
            error.info.message += f" Its fallbacks failed too: {', '.join(fallen)}."
        if run.calls >= run.cap:
            error.info.message += (f" The request made {run.cap} upstream calls, the most one may "
                                   "(max_attempts_total).")
        return error

    def _routes(self, ex: Exchange, model: str) -> list[Route]:
        """The routes of `model` for what `ex` asks (§5.1); a 404 when no upstream serves it, a 400
        when only upstreams that cannot do what it asks do."""
        every = self.router.routes_to_try(model)
        if not every:
            raise ProxyError(404, f"The model {model!r} is not served by this proxy; GET /v1/models lists "
                                  "the models it serves.", "not_found", code="model_not_found", param="model")
        routes = able_routes(ex.operation, every)
        if not routes:
            kinds = ", ".join(sorted({r.upstream.protocol for r in every}))
            raise ProxyError(400, f"The model {model!r} is served here only by upstreams whose protocol has no "
                                  f"embeddings endpoint ({kinds}); ask for an embeddings model of an "
                                  "OpenAI-compatible or Gemini upstream.", "invalid_request",
                             code="model_not_embeddings", param="model")
        return routes

    def _fallback(self, ex: Exchange, walk: Walk, failed: ModelFailed,
                  gate: FallbackGate) -> tuple[Exchange, list[Route]] | None:
        """The next model `ex` may fall back to after `failed`, with its routes; None when none is left."""
        for model in walk.candidates(failed.reason or UNSERVED):
            walk.tried.append(model)
            routes = able_routes(ex.operation, self.router.routes_to_try(model))  # a fallback is held to what ex asks
            why_not = "no upstream serves it for this request" if not routes else gate(model, routes)
            if why_not is None:
                log.info("fallback rid=%s from=%s to=%s because=%s (%s)", ex.request_id, ex.model, model,
                         failed.reason, failed.error.info.message[:200])
                return replace(ex, model=model), routes
            log.info("fallback skipped rid=%s from=%s to=%s: %s", ex.request_id, ex.model, model, why_not)
        return None

    def _serve(self, ex: Exchange, routes: list[Route], run: _Run) -> RelayResult:
        """`ex` on `routes` in turn, accounts per route (§5.1): the answer, or ModelFailed."""
        record, budget = run.record, run.budget
        failures: list[NextAccount] = []
        for route in routes:
            pool = self.pools[route.upstream.name]
            conversation = prefer = None
            if self.affinity is not None:
                conversation = self.affinity.conversation(ex, route.upstream)
                prefer = self.affinity.preferred(ex, route.upstream, conversation)
                if record is not None and conversation is not None:
                    record.conversation_id = conversation
            tried: set[str] = set()
            while len(tried) < pool.settings.max_attempts and run.calls < run.cap:
                if budget.spent():
                    raise self._out_of_time(ex, budget, failures)
                lease = pool.lease(tried, prefer)
                if lease is None:
                    break
                tried.add(lease.account.id)
                run.calls += 1
                attempt = Attempt(run.kit, ex, route, lease, budget, record, run.decoded, run.stream_ended)
                try:
                    try:
                        with hangup_aborts(ex.client_socket):
                            result = attempt.run()
                    finally:  # what the attempt told, however it ended, before anything else is said
                        if record is not None and attempt.told is not None:
                            record.attempted(attempt.told)
                    if record is not None:
                        self._answered(record, result)
                    if self.affinity is not None:
                        self.affinity.served(route.upstream, conversation, lease.account.id, prefer)
                    return result
                except NextAccount as failed:
                    failures.append(failed)
                except ClientGone:
                    lease.release(failure="client_gone")
                    log.info("client disconnected before the upstream answered rid=%s upstream=%s account=%s",
                             ex.request_id, route.upstream.name, lease.account.id)
                    raise ProxyError(499, "The client closed the connection before the answer began.",
                                     "invalid_request") from None
                except ProxyError as err:
                    lease.release()  # the attempt's answer for the client: released if it was not already
                    raise ModelFailed(err, reason_for(err, attempt.told.klass if attempt.told else None)) from None
                except BaseException:
                    lease.release()  # the request itself is at fault (or the proxy is): the account is free
                    raise
        if budget.spent():
            raise self._out_of_time(ex, budget, failures)
        raise ModelFailed(self._unserved(ex, routes, failures), UNSERVED)

    def _answered(self, record: RequestRecord, result: RelayResult) -> None:
        """The request's record learns what the attempt that answered returned."""
        if result.streaming:
            record.first_byte()  # the primed first frame goes out as soon as the blueprint returns
            self.hooks.stream_opened(record)
        else:
            record.usage = result.usage

    def _out_of_time(self, ex: Exchange, budget: FirstByteBudget, failures: list[NextAccount]) -> ProxyError:
        assert budget.total is not None
        message = out_of_time_message([f.tried for f in failures], budget.total)
        log.info("first byte deadline rid=%s: %s", ex.request_id, message)
        return ProxyError(504, message, "timeout")

    def _unserved(self, ex: Exchange, routes: list[Route], failures: list[NextAccount]) -> ProxyError:
        """No account served the request: say why, in terms the operator can act on."""
        if len(failures) > 1 and all(f.tried.waited is not None for f in failures):
            return ProxyError(504, all_timed_out_message([f.tried for f in failures]), "timeout")
        if failures and all(f.network or f.action == "next" for f in failures):
            # Every account was tried and none was taken out of rotation: the upstream itself is
            # unreachable or overloaded, and its own error says so better than "no account".
            return ProxyError.from_info(failures[-1].info)
        parts, next_back, throttled = [], None, []
        for route in routes:
            avail = self.pools[route.upstream.name].availability()
            throttled.append(avail.throttled)
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(avail.reasons.items()))
            proxies = f", {n} whose outbound proxies are all cooling" if (n := avail.proxies_cooling) else ""
            parts.append(f"upstream {route.upstream.name!r} has {avail.total} account(s): {avail.cooling} cooling, "
                         f"{avail.disabled} disabled, {avail.busy} at max_concurrency{proxies}"
                         + (f" ({why})" if why else ""))
            if avail.next_back is not None:
                next_back = avail.next_back if next_back is None else min(next_back, avail.next_back)
        # Every account that could serve is rate-limited, cooling or at max_concurrency: a 429, which
        # SDKs and agents back off on and retry after Retry-After (the soonest return), where a 503
        # would read as an outage. 503 stays for accounts disabled or absent.
        rate_limited = any(throttled) and all(t is not False for t in throttled)
        head = ("Every account that could serve model {!r} is rate-limited or busy" if rate_limited
                else "No active account is available for model {!r}")
        message = head.format(ex.model) + ": " + "; ".join(parts) + "."
        if next_back is not None:
            message += f" The next cooling account returns in {max(1, math.ceil(next_back))}s."
        if failures:
            last = failures[-1].info
            message += f" The last attempt failed with HTTP {last.status}: {last.message}"
        headers = {"Retry-After": str(max(1, math.ceil(next_back)))} if next_back is not None else {}
        if rate_limited:
            headers.setdefault("Retry-After", "1")
            return ProxyError(429, message, "rate_limit", code="all_accounts_rate_limited", headers=headers)
        return ProxyError(503, message, "unavailable", code="no_active_account", headers=headers)
