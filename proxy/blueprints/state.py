"""The application's state, typed: `AppState`, what every endpoint reads, and `app_state()`, the
one way to read it.

Owns the type and where the state is kept on the Flask app (`app.extensions["llm_proxy"]`, set by
`install`); serving builds it (proxy.serving.app) and a config reload replaces it whole
(proxy.serving.reconfigure: what is built from the config is built again, the rest carried
over). A request reads the state once, when it starts, and keeps what it read to its end — so
one in flight finishes on the config it began with. Builds nothing and decides nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from flask import Flask, current_app

from proxy.blueprints.auth import KeyChecker
from proxy.budgets.guard import Budgets
from proxy.config import Config
from proxy.conversations.store import ResponseStore
from proxy.keys.directory import KeyDirectory
from proxy.limits.limiter import Limiter
from proxy.money.prices import PriceBook
from proxy.ops.hooks import HookSet
from proxy.ops.metrics import LiveGauges, Metrics
from proxy.ops.request_log import RequestLogWriter
from proxy.ops.usage_writer import UsageWriter
from proxy.pool.pool import AccountPool
from proxy.relay.loop import Relay
from proxy.state.health import StoreHealth
from proxy.upstream.catalog import Catalog
from proxy.upstream.client import UpstreamClient
from proxy.upstream.keeper import PoolKeeper
from proxy.upstream.token_count import TokenCounter

KEY = "llm_proxy"  # where the state is kept in `app.extensions`


class Reloading(Protocol):
    """The app's config reload (proxy.serving.reconfigure.Reloader), as the edge and the worker call it."""

    master_pid: int | None  # gunicorn's master, once a worker of ours runs the app (set by the worker)

    def reload(self) -> bool: ...
    def request(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class AppState:
    config: Config
    relay: Relay
    hooks: HookSet
    catalog: Catalog
    tokens: TokenCounter  # prompt tokens counted by the upstream, where its protocol can (count_tokens endpoints)
    pools: dict[str, AccountPool]
    response_store: ResponseStore
    keeper: PoolKeeper
    client_keys: KeyChecker
    admin_keys: KeyChecker
    client: UpstreamClient
    usage: UsageWriter | None  # the usage rows and recent requests, to the state store; None: usage.enabled false
    live: LiveGauges  # streams open and workers alive, over the instance's workers
    limiter: Limiter  # client keys' limits (proxy.limits)
    budgets: Budgets  # client keys' and key groups' USD budgets (proxy.budgets)
    reloader: Reloading  # lives as long as the app: every reload carries it over
    prices: PriceBook  # the config's prices (proxy.money.prices): built again by a reload
    store_health: StoreHealth  # whether the state store answers now (Redis, with backend redis)
    # Which config this is: its file, when this worker loaded it, and how many reloads the host
    # (gunicorn's master) has accepted before it — the same number in every worker once all reloaded.
    config_source: str | None = None
    config_loaded_at: float = 0.0
    config_generation: int = 1
    metrics: Metrics | None = None  # None: metrics.enabled is false
    keys: KeyDirectory | None = None  # keys made at runtime (proxy.keys): the same across reloads
    request_log: RequestLogWriter | None = None  # requests kept with their bodies; None: request_log.enabled false


def app_state(app: Flask | None = None) -> AppState:
    """The state `app` serves now (default: the app of the request being handled)."""
    state: AppState = (app if app is not None else current_app).extensions[KEY]
    return state


def installed(app: Any) -> AppState | None:
    """The state of `app` if it is an app with one (a worker asks before its app is built)."""
    state: AppState | None = getattr(app, "extensions", {}).get(KEY)
    return state


def install(app: Flask, state: AppState) -> None:
    """Make `state` the one `app` serves, for every request that starts from now on."""
    app.extensions[KEY] = state
