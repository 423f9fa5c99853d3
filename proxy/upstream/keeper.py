"""The pool keeper: one background greenlet per worker that keeps pool state shared, durable and
healthy.

Owns, every `SYNC_INTERVAL` seconds: handing this worker's pool changes to the store and taking
in other workers' (so an account out of rotation in one worker is out in all within ~2 s, and so
is an outbound proxy — at once with a store that announces changes, Redis's pub/sub, which wakes
the keeper from a greenlet of its own); renewing this worker's `max_concurrency` slots when they
are counted across hosts; running the `tick_hooks` (a store's retry of what it buffered while
unreachable); and, in the one worker (per host; per cluster with Redis) that holds the store's leader lease,
probing disabled accounts (config `pool.probe`, default `GET {base_url}/models` with the account's
key) and re-enabling those that answer — except accounts an admin disabled —, probing cooling
outbound proxies the same way (the same request through the proxy, with the key of an account
that uses it: any HTTP answer shows the proxy works again, and restores it), and refreshing
balances (`pool.balance`). Store
calls run on a real thread (SQLite blocks); probes run in their own greenlets; nothing here ever
blocks a request. Started after fork by `create_app`, stopped — with a final flush — when the
worker exits. One keeper lives as long as its worker: a config reload hands it the new pools
(`adopt`), and a pool the new config no longer has is retired — its changes still written until
its last lease is released, so a stream that outlives its upstream's config still counts.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import gevent
from gevent import monkey
from gevent.event import Event

from proxy.config import Account, Timeouts, Upstream
from proxy.config.values import redact_proxy_url
from proxy.pool.classify import cooldown_until
from proxy.pool.lease import SlotLedger
from proxy.pool.pool import AccountPool
from proxy.pool.proxies import ProxyState
from proxy.pool.state import COOLING, DISABLED, AccountState
from proxy.pool.store import StateStore
from proxy.upstream.client import Target, UpstreamClient, UpstreamNetworkError, read_capped
from proxy.upstream.outbound import ProxiesExhausted, send_via_proxies

log = logging.getLogger("proxy.pool")

SYNC_INTERVAL = 1.0
PROBE_TIMEOUTS = Timeouts(connect=5.0, read=15.0)
T = TypeVar("T")
_running: list[PoolKeeper] = []


def blocking(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking call on a real thread when gevent drives this process, so the loop goes on.
    A method of a `cooperative` store (network IO over gevent's sockets: Redis) runs here, on the
    calling greenlet — its connections belong to this thread's event loop."""
    if getattr(getattr(fn, "__self__", None), "cooperative", False):
        return fn(*args)
    if monkey.is_module_patched("socket"):
        # The thread hands back what the call raised instead of raising it there: gevent's
        # threadpool would print every exception of a task to stderr with its traceback (a full
        # disk would fill the log), though the caller gets it and decides what it means.
        done, result = gevent.get_hub().threadpool.apply(_outcome, (fn, args))
        if not done:
            raise result
        return result
    return fn(*args)


def _outcome(fn: Callable[..., T], args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as exc:
        return False, exc


def call_store(store: Any, fn: Callable[[], T]) -> T:
    """`fn`, a call on `store`: on a thread when the store blocks (its `blocking`), else here — as a
    `cooperative` store's calls always are (see `blocking`)."""
    if not store.blocking or getattr(store, "cooperative", False):
        return fn()
    return blocking(fn)


class PoolKeeper:
    def __init__(self, pools: dict[str, AccountPool], store: StateStore, client: UpstreamClient,
                 holder: str | None = None, slots: SlotLedger | None = None) -> None:
        self.pools = pools
        self.store = store
        self.client = client
        self.holder = holder or f"{os.uname().nodename}:{os.getpid()}"
        self.slots = slots  # max_concurrency across hosts (Redis); renewed every tick
        self.tick_hooks: list[Callable[[], None]] = []  # run every tick (retries of buffered writes)
        self._watcher: gevent.Greenlet | None = None
        self._version = 0
        self._proxy_version = 0
        self._greenlet: gevent.Greenlet | None = None
        self._last_probe: dict[tuple[str, str], float] = {}
        self._last_balance: dict[tuple[str, str], float] = {}
        self._probing: set[tuple[str, str]] = set()  # (upstream, account id or proxy URL) being probed
        self._wake = Event()
        self._sync_lock = threading.Lock()  # greenlet-aware once gevent has patched threading
        self._retired: list[AccountPool] = []  # pools of an earlier config with leases still out
        for pool in pools.values():
            pool.on_change = self._wake.set
            pool.slots = slots

    def adopt(self, pools: dict[str, AccountPool]) -> None:
        """The pools to keep, at start and after a config reload. A pool new to the keeper takes in
        everything stored for its upstream — states, counters, runtime accounts from before a
        restart — before it serves; a pool no longer in `pools` is retired."""
        with self._sync_lock:  # no sync in between: the fresh pools must not miss a change
            fresh = [pool for name, pool in pools.items() if self.pools.get(name) is not pool]
            records = blocking(self.store.load) if fresh else []
            for pool in fresh:
                pool.on_change = self._wake.set
                pool.slots = self.slots
                pool.apply_remote([r for r in records if r.upstream == pool.upstream.name], counters=True)
            if not self.pools and not self._version:  # the first pools: everything stored is taken in
                self._version = max((r.version for r in records), default=0)
            self._retired += [pool for name, pool in self.pools.items() if pools.get(name) is not pool]
            self.pools = pools
            self._take_proxies()

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)
            _running.append(self)
            watch = getattr(self.store, "watch", None)
            if watch is not None:  # a store that announces changes (Redis pub/sub): sync as they come
                self._watcher = gevent.spawn(watch, self._wake.set)

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.kill(block=True, timeout=5)
            self._watcher = None
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=5)
            self._greenlet = None
            if self in _running:
                _running.remove(self)
        self.sync()  # nothing a finished request changed is lost

    def _run(self) -> None:
        while True:
            try:
                self.sync()
                if self.slots is not None:
                    renew = getattr(self.slots, "renew", None)
                    if renew is not None:
                        renew()
                for hook in self.tick_hooks:
                    hook()
                if blocking(self.store.lead, self.holder, 5 * SYNC_INTERVAL):
                    self.maintain(time.time())
            except gevent.GreenletExit:
                raise
            except Exception:
                log.exception("pool keeper: sync failed; retrying")
            # A state change wakes us early: it reaches the store at once, and the other workers
            # within their next tick.
            self._wake.wait(SYNC_INTERVAL)
            self._wake.clear()

    def sync(self) -> None:
        """Write this worker's changes, read everyone else's. One at a time: an admin request that
        syncs must not read the store while the keeper's own write is still on its way."""
        with self._sync_lock:
            reseed = getattr(self.store, "take_reseed", None)
            if reseed is not None and reseed():  # the shared store lost its data: give it ours again
                for pool in self.pools.values():
                    pool.restate()
            states, deltas, proxies = [], [], []
            # Judged before their changes are taken: a lease released after this is written next time.
            drained = [pool for pool in self._retired if not pool.busy()]
            for pool in [*self.pools.values(), *self._retired]:
                pool_states, pool_deltas = pool.pending()
                states += pool_states
                deltas += pool_deltas
                proxies += pool.pending_proxies()
            blocking(self.store.write, states, deltas, proxies)
            self._retired = [pool for pool in self._retired if pool not in drained]
            records, version = blocking(self.store.changes_since, self._version)
            self._version = version
            for name, pool in self.pools.items():
                pool.apply_remote([r for r in records if r.upstream == name])
            self._take_proxies()

    def _take_proxies(self) -> None:
        records, self._proxy_version = blocking(self.store.proxy_changes_since, self._proxy_version)
        for name, pool in self.pools.items():
            pool.apply_remote_proxies([r for r in records if r.upstream == name])

    # ------------------------------------------------------------ leader's duties

    def maintain(self, now: float) -> list[gevent.Greenlet]:
        """Start the probes and refreshes that are due; return their greenlets."""
        started = []
        for pool in self.pools.values():
            settings = pool.settings
            for proxy, user in pool.cooling_proxies():
                key = (pool.upstream.name, proxy.url)
                if user is not None and key not in self._probing \
                        and self._last_probe.get(key, proxy.since or 0.0) + settings.probe.interval <= now:
                    self._last_probe[key] = now
                    self._probing.add(key)
                    started.append(gevent.spawn(self._probe_proxy, pool, proxy, user, key))
            for state in pool.states():
                key = (pool.upstream.name, state.id)
                # An admin's decision stands until an admin reverses it; the pool's own are probed,
                # first one interval after the account was taken out.
                probe_due = self._last_probe.get(key, state.since or 0.0) + settings.probe.interval <= now
                if state.status == DISABLED and not (state.reason or "").startswith("admin:") and probe_due \
                        and key not in self._probing:
                    self._last_probe[key] = now
                    self._probing.add(key)
                    started.append(gevent.spawn(self._probe, pool, state, key))
                balance = settings.balance
                if balance is not None and now - self._last_balance.get(key, 0.0) >= balance.interval:
                    self._last_balance[key] = now
                    started.append(gevent.spawn(self._refresh_balance, pool, state))
        return started

    def _probe_proxy(self, pool: AccountPool, proxy: ProxyState, user: Account, key: tuple[str, str]) -> None:
        """The account probe's request through a cooling proxy: any HTTP answer, whatever its
        status, came through the proxy, which is then restored."""
        shown, probe = redact_proxy_url(proxy.url), pool.settings.probe
        target = Target.of(pool.upstream, user.api_key, proxy.url, timeouts=PROBE_TIMEOUTS)
        try:
            resp = self.client.send(target, probe.path, None, stream=True, method=probe.method,
                                    request_id=f"probe-{self.holder}")
            status = resp.status_code
            resp.close()
        except UpstreamNetworkError as exc:
            if exc.cause == "proxy":
                wait = pool.proxy_failed(proxy.url, exc.detail)
                log.info("probe %s proxy %s: %s; cooling %gs more", pool.upstream.name, shown, exc.detail, wait)
            else:  # through the proxy, the upstream failed: says nothing of the proxy
                log.info("probe %s proxy %s: %s", pool.upstream.name, shown, exc.info.message)
            return
        finally:
            self._probing.discard(key)
        pool.proxy_ok(proxy.url)
        log.info("probe %s proxy %s: HTTP %d through it, back in rotation", pool.upstream.name, shown, status)

    def _probe(self, pool: AccountPool, state: AccountState, key: tuple[str, str]) -> None:
        probe = pool.settings.probe

        def send(proxy: str | None) -> Any:
            return self.client.send(_target(pool.upstream, state, proxy), probe.path, None, stream=True,
                                    method=probe.method, request_id=f"probe-{self.holder}")

        try:
            resp = send_via_proxies(pool, state.account, send)
            status, headers = resp.status_code, dict(resp.headers)
            resp.close()
        except (UpstreamNetworkError, ProxiesExhausted) as exc:
            log.info("probe %s/%s: %s", pool.upstream.name, state.id, exc.info.message)
            return
        finally:
            self._probing.discard(key)
        if 200 <= status < 300 or status == 429:  # the key works again (429: it works, but rests first)
            pool.enable(state.id)
            if status == 429:
                until = cooldown_until(headers, time.time(), pool.settings.cooldown)
                pool.cool(state.id, until, "exhausted: probe answered HTTP 429")
            log.info("probe %s/%s: HTTP %d, back in rotation", pool.upstream.name, state.id, status)
        else:
            log.info("probe %s/%s: HTTP %d, stays disabled", pool.upstream.name, state.id, status)

    def _refresh_balance(self, pool: AccountPool, state: AccountState) -> None:
        balance = pool.settings.balance
        assert balance is not None

        def send(proxy: str | None) -> Any:
            return self.client.send(_target(pool.upstream, state, proxy), balance.path, None, stream=True,
                                    method=balance.method, request_id=f"balance-{self.holder}")

        try:
            resp = send_via_proxies(pool, state.account, send)
            raw, status = read_capped(resp), resp.status_code
        except (UpstreamNetworkError, ProxiesExhausted) as exc:
            log.info("balance %s/%s: %s", pool.upstream.name, state.id, exc.info.message)
            return
        value = _field(raw, balance.field) if status == 200 else None
        if value is None:
            log.info("balance %s/%s: HTTP %d, no number at %r", pool.upstream.name, state.id, status, balance.field)
            return
        pool.set_balance(state.id, value)
        if value > 0 and state.status == COOLING and (state.reason or "").startswith("exhausted: HTTP 402"):
            pool.enable(state.id)  # paid for again


def _target(upstream: Upstream, state: AccountState, proxy: str | None) -> Target:
    return Target.of(upstream, state.account.api_key, proxy, timeouts=PROBE_TIMEOUTS)


def _field(raw: bytes, path: str) -> float | None:
    """A number at a dotted path in a JSON body (`data.balance`, `balances.0.total`)."""
    try:
        value: Any = json.loads(raw)
    except ValueError:
        return None
    for part in path.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def stop_all() -> None:
    """Stop every keeper in this process (gunicorn's worker_exit hook calls this)."""
    for keeper in list(_running):
        try:
            keeper.stop()
        except Exception:
            log.exception("pool keeper: final sync failed")
