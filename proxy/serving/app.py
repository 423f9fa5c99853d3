"""The Flask application factory: config in, a ready WSGI app out.

Owns wiring — the upstream HTTP session, one account pool per upstream with its state store and
keeper, the router, the relay, the model catalog, the key checkers, the response store, the HTTP
edge hooks and the blueprints — and nothing else. Called once per
gunicorn worker, after fork and after gevent has patched the standard library, so every lock,
session and greenlet here belongs to that worker.

The app's state is one `AppState` (proxy/blueprints/state.py). What is built from the config
(`config_parts`, proxy/serving/parts.py) is built again by a reload and swapped in whole
(proxy.serving.reconfigure); the rest — the hooks, the response
store, the keeper and its store — lives as long as the worker. Every request reads the state once,
when it starts, and keeps what it read to its end.
"""

from __future__ import annotations

import os
import time

from flask import Flask

from proxy import config as config_module
from proxy import logs
from proxy.blueprints import (
    admin,
    admin_status,
    http,
    key_admin,
    keys,
    messages,
    models,
    readiness,
    request_log,
    responses,
    responses_compact,
    responses_socket,
    status_page,
    usage,
)
from proxy.blueprints import metrics as metrics_endpoint
from proxy.blueprints import reload as reload_endpoints
from proxy.blueprints.completions import completions_blueprint
from proxy.blueprints.embeddings import embeddings_blueprint
from proxy.blueprints.state import AppState, app_state, install
from proxy.config import Config
from proxy.conversations.compaction_key import compaction_secret
from proxy.keys.directory import KeyDirectory
from proxy.keys.pepper import load_pepper
from proxy.keys.store import KeyStore
from proxy.money.costing import Costing
from proxy.ops.hooks import HookSet
from proxy.ops.log_lines import LogLines
from proxy.ops.metrics import LiveGauges, Metrics
from proxy.ops.recent import RecentRequests
from proxy.ops.request_log import RequestLog, RequestLogWriter, redactor_for
from proxy.ops.usage import UsageAccounting
from proxy.ops.usage_writer import UsageWriter
from proxy.protocols import registry
from proxy.protocols.responses.compaction import Sealer
from proxy.serving import forwarded, master
from proxy.serving.parts import config_parts
from proxy.serving.reconfigure import Reloader
from proxy.serving.state_backend import open_stores
from proxy.upstream.client import UpstreamClient
from proxy.upstream.keeper import PoolKeeper, call_store

# The endpoints besides each protocol's completion endpoint, one module each.
ENDPOINTS = (messages, responses, responses_socket, responses_compact, models, admin, key_admin, metrics_endpoint,
             admin_status,
             readiness, reload_endpoints, usage, request_log, keys, status_page)


def known_secrets(state: AppState) -> tuple[str, ...]:
    """Every secret the config knows — the accounts' keys, the client and admin keys — which the
    request log removes from whatever it keeps."""
    config = state.config
    return (*state.relay.secrets, *(k.key for k in (*config.client_keys, *config.admin_keys) if k.key))


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
    # state.backend: sqlite (one host) or redis (several); forked by our master, which migrated the file
    stores = open_stores(config, migrated_here=master.accepted() is not None)
    keeper = PoolKeeper({}, stores.pool, client, holder=stores.holder, slots=stores.slots)
    # The operators' concerns plug in here (proxy.ops). Costing first: every other hook — usage,
    # metrics, recent requests, budgets — reads the cost it puts on the record.
    hooks = HookSet([Costing(lambda: app_state(app).prices), LogLines()])
    limiter = stores.limiter  # client keys' limits: charged when each request ends
    hooks.add(limiter)
    budgets = stores.budgets  # USD budgets: settled to each request's cost when it ends
    hooks.add(budgets)
    usage_writer = None
    if config.usage.enabled:
        usage_writer = UsageWriter(stores.usage, config.usage.retention_days)
        keeper.tick_hooks.append(usage_writer.retry)  # what the store kept while it could not write
        hooks.add(RecentRequests(usage_writer))  # before usage: its entry rides along with the usage commit
        hooks.add(UsageAccounting(usage_writer))
    live = LiveGauges()
    hooks.add(live)
    request_writer = None
    if stores.requests is not None:  # request_log.enabled: requests kept with their bodies
        request_writer = RequestLogWriter(stores.requests, redactor_for(lambda: app_state(app).config.request_log,
                                                                     lambda: known_secrets(app_state(app))))
        hooks.add(RequestLog(lambda: app_state(app).config.request_log, request_writer))
    if config.tracing.enabled:  # OpenTelemetry spans, made in this worker (the app is built after the fork)
        from proxy.ops.tracing import Tracing  # imports the otel extra: only when it is on

        hooks.add(Tracing(config.tracing, lambda name: registry.get(name).provider or name))

    def served(model: str) -> bool:
        """Whether the router serves `model` (what earns it a metric label of its own) — the router
        of the config served now, so a reload's models count from then on."""
        return bool(app_state(app).relay.router.resolve(model))

    metrics = Metrics(live, served) if config.metrics.enabled else None
    if metrics is not None:
        hooks.add(metrics)
        budgets.alerts.on_alert = metrics.budget_alert
        if request_writer is not None:
            request_writer.on_drop = metrics.request_log_drop
    affinity = stores.affinity  # which account served each conversation last
    # states, counters and runtime accounts from before a restart
    parts = config_parts(config, keeper, client, hooks, affinity=affinity)
    parts["prices"].warm()  # genai-prices' table, before the first request rather than during it
    if start_background:
        keeper.start()
    directory = runtime_keys(config, stores.keys)
    if start_background:
        directory.start()
    responses_store = stores.responses
    responses_store.sealer = Sealer(compaction_secret(config))
    source = config.source if config.source != "<memory>" else None
    app = Flask("proxy")
    install(app, AppState(**parts, response_store=responses_store, keeper=keeper, hooks=hooks, client=client,
                          usage=usage_writer, live=live, metrics=metrics, config_source=source,
                          config_loaded_at=time.time(), config_generation=generation, store_health=stores.health,
                          limiter=limiter, budgets=budgets, reloader=Reloader(app), keys=directory,
                          request_log=request_writer))
    http.install(app)
    # the client's address behind nginx / Caddy (server.forwarded_allow_ips): what the access log shows
    app.wsgi_app = forwarded.middleware(app.wsgi_app, config.server.forwarded_allow_ips)  # type: ignore[method-assign]
    for protocol in registry.all_protocols():  # each protocol's endpoint, plugins' included
        app.register_blueprint(completions_blueprint(protocol))
    app.register_blueprint(embeddings_blueprint())  # every protocol's embeddings endpoints
    for module in ENDPOINTS:
        app.register_blueprint(module.bp)
    return app


def runtime_keys(config: Config, store: KeyStore) -> KeyDirectory:
    """The worker's directory of keys made at runtime, current as of now (then kept so by its greenlet)."""
    pepper = load_pepper(config.keys.pepper, config.state_path, getattr(store, "client", None), config.state)
    directory = KeyDirectory(store, pepper, call=lambda fn: call_store(store, fn))
    directory.audit_retention = config.audit.retention_days * 86400.0
    directory.refresh()
    return directory
