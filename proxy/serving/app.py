"""The Flask application factory: config in, a ready WSGI app out.

Owns wiring — the upstream HTTP session, one account pool per upstream with its state store and
keeper, the router, the relay, the model catalog, the key checkers, the response store, the HTTP
edge hooks and the blueprints — and nothing else. Called once per
gunicorn worker, after fork and after gevent has patched the standard library, so every lock,
session and greenlet here belongs to that worker.

The app's state is one `AppState`. What is built from the config (`config_parts`) is built again
by a reload and swapped in whole (proxy.serving.reconfigure); the rest — the hooks, the response
store, the keeper and its store — lives as long as the worker. Every request reads the state once,
when it starts, and keeps what it read to its end.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from flask import Flask

from proxy import config as config_module
from proxy import logs
from proxy.blueprints import (
    admin,
    admin_status,
    http,
    keys,
    messages,
    models,
    readiness,
    responses,
    responses_compact,
    responses_socket,
    status_page,
    usage,
)
from proxy.blueprints import metrics as metrics_endpoint
from proxy.blueprints import reload as reload_endpoints
from proxy.blueprints.auth import KeyChecker
from proxy.blueprints.completions import completions_blueprint
from proxy.config import Config
from proxy.conversations.compaction_key import compaction_secret
from proxy.conversations.store import ResponseStore
from proxy.limits.limiter import Limiter
from proxy.ops.hooks import HookSet
from proxy.ops.log_lines import LogLines
from proxy.ops.metrics import LiveGauges, Metrics
from proxy.ops.recent import RecentRequests
from proxy.ops.usage import UsageAccounting
from proxy.ops.usage_writer import UsageWriter
from proxy.pool.pool import AccountPool
from proxy.protocols import registry
from proxy.protocols.responses.compaction import Sealer
from proxy.relay.affinity import Affinity
from proxy.relay.loop import Relay
from proxy.relay.transport import HTTPTransport
from proxy.routing import Router
from proxy.serving import master
from proxy.serving.reconfigure import Reloader
from proxy.serving.state_backend import open_stores
from proxy.state.health import StoreHealth
from proxy.upstream.catalog import Catalog
from proxy.upstream.client import UpstreamClient
from proxy.upstream.keeper import PoolKeeper


@dataclass
class AppState:
    config: Config
    relay: Relay
    hooks: HookSet
    catalog: Catalog
    pools: dict[str, AccountPool]
    response_store: ResponseStore
    keeper: PoolKeeper
    client_keys: KeyChecker
    admin_keys: KeyChecker
    client: UpstreamClient
    usage: UsageWriter | None  # the usage rows and recent requests, to the state store; None: usage.enabled false
    live: LiveGauges  # streams open and workers alive, over the instance's workers
    # Which config this is: its file, when this worker loaded it, and how many reloads the host
    # (gunicorn's master) has accepted before it — the same number in every worker once all reloaded.
    config_source: str | None = None
    config_loaded_at: float = 0.0
    config_generation: int = 1
    metrics: Metrics | None = None  # None: metrics.enabled is false
    store_health: StoreHealth | None = None  # whether the shared state store (Redis) answers now
    limiter: Limiter | None = None  # client keys' limits (proxy.limits); set by create_app


# The endpoints besides each protocol's completion endpoint, one module each.
ENDPOINTS = (messages, responses, responses_socket, responses_compact, models, admin, metrics_endpoint, admin_status,
             readiness, reload_endpoints, usage, keys, status_page)


def create_app(config: Config | None = None, start_background: bool = True) -> Flask:
    generation = 1
    if config is None:
        # A worker gunicorn forks gets the config its master checked last (at start or at a
        # reload), so a file edited into an invalid state since cannot stop a worker from booting.
        accepted = master.accepted()
        if accepted is not None:
            config, generation = accepted
        else:
            path = os.environ.get("LLM_PROXY_CONFIG")
            if not path:
                raise config_module.ConfigError("", "set LLM_PROXY_CONFIG to the path of the YAML config file")
            config = config_module.load(path)
    logs.configure(config.log_level, config.logging.format)
    config = registry.resolve(config)  # every upstream's protocol by its name; plugins imported
    client = UpstreamClient(trust_env=config.trust_env)
    stores = open_stores(config)  # state.backend: sqlite (one host) or redis (several)
    keeper = PoolKeeper({}, stores.pool, client, holder=stores.holder, slots=stores.slots)
    hooks = HookSet([LogLines()])  # the operators' concerns plug in here (proxy.ops)
    limiter = stores.limiter  # client keys' limits: charged when each request ends
    hooks.add(limiter)
    usage_writer = None
    if config.usage.enabled:
        usage_writer = UsageWriter(stores.usage, config.usage.retention_days)
        keeper.tick_hooks.append(usage_writer.retry)  # what the store kept while it could not write
        hooks.add(RecentRequests(usage_writer))  # before usage: its entry rides along with the usage commit
        hooks.add(UsageAccounting(usage_writer))
    live = LiveGauges()
    hooks.add(live)

    def served(model: str) -> bool:
        """Whether the router serves `model` (what earns it a metric label of its own) — the router
        of the config served now, so a reload's models count from then on."""
        return bool(app.extensions["llm_proxy"].relay.router.resolve(model))

    metrics = Metrics(live, served) if config.metrics.enabled else None
    if metrics is not None:
        hooks.add(metrics)
    affinity = stores.affinity  # which account served each conversation last
    # states, counters and runtime accounts from before a restart
    parts = config_parts(config, keeper, client, hooks, affinity=affinity)
    if start_background:
        keeper.start()
    responses_store = stores.responses
    responses_store.sealer = Sealer(compaction_secret(config))
    source = config.source if config.source != "<memory>" else None
    state = AppState(**parts, response_store=responses_store, keeper=keeper, hooks=hooks, client=client,
                     usage=usage_writer, live=live, metrics=metrics, config_source=source, config_loaded_at=time.time(),
                     config_generation=generation, store_health=stores.health, limiter=limiter)

    app = Flask("proxy")
    app.extensions["llm_proxy"] = state
    app.extensions["llm_proxy_reload"] = Reloader(app)
    http.install(app)
    for protocol in registry.all_protocols():  # each protocol's endpoint, plugins' included
        app.register_blueprint(completions_blueprint(protocol))
    for module in ENDPOINTS:
        app.register_blueprint(module.bp)
    return app


def config_parts(config: Config, keeper: PoolKeeper, client: UpstreamClient, hooks: HookSet,
                 reload: bool = False, affinity: Affinity | None = None) -> dict[str, Any]:
    """The `AppState` fields built from the config: its pools (the keeper's own where the upstream
    is still configured, so leases out and `max_concurrency` stay right; a reload reconciles each
    with the file, proxy.pool.membership), the router and relay, the catalog and the key checkers."""
    pools = {u.name: keeper.pools.get(u.name) or AccountPool(u) for u in config.upstreams}
    keeper.adopt(pools)  # a new pool takes in what the store holds for its upstream
    if reload:
        for upstream in config.upstreams:
            pools[upstream.name].reconfigure(upstream)
    keeper.client = client
    secrets = tuple(a.api_key for u in config.upstreams for a in u.accounts)
    relay = Relay(config, Router(config.upstreams), pools, HTTPTransport(client, pools), secrets, hooks=hooks,
                  affinity=affinity)
    return {"config": config, "relay": relay, "catalog": Catalog(config, pools, client), "pools": pools,
            "client_keys": KeyChecker(config.client_keys), "admin_keys": KeyChecker(config.admin_keys)}
