"""The Flask application factory: config in, a ready WSGI app out.

Owns wiring — the upstream HTTP session, one account pool per upstream with its state store and
keeper, the router, the relay, the model catalog, the response store, the HTTP edge hooks and the
blueprints — and nothing else. Called once per
gunicorn worker, after fork and after gevent has patched the standard library, so every lock,
session and greenlet here belongs to that worker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from flask import Flask

from proxy import config as config_module
from proxy import logs
from proxy.blueprints import admin, http, messages, models, responses, responses_compact, responses_socket
from proxy.blueprints.auth import KeyChecker
from proxy.blueprints.completions import completions_blueprint
from proxy.config import Config
from proxy.ops.hooks import HookSet
from proxy.pool.pool import AccountPool
from proxy.pool.store import MemoryStore, SQLiteStore, StateStore
from proxy.protocols import registry
from proxy.protocols.responses.compaction import Sealer
from proxy.protocols.responses.store import ResponseStore
from proxy.relay.loop import Relay
from proxy.relay.transport import HTTPTransport
from proxy.routing import Router
from proxy.serving.compaction_key import compaction_secret
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


def create_app(config: Config | None = None, start_background: bool = True) -> Flask:
    if config is None:
        path = os.environ.get("LLM_PROXY_CONFIG")
        if not path:
            raise config_module.ConfigError("", "set LLM_PROXY_CONFIG to the path of the YAML config file")
        config = config_module.load(path)
    logs.configure(config.log_level)
    config = registry.resolve(config)  # every upstream's protocol by its name; plugins imported
    client = UpstreamClient(trust_env=config.trust_env)
    pools = {u.name: AccountPool(u) for u in config.upstreams}
    store: StateStore = SQLiteStore(config.state_path) if config.state_path else MemoryStore()
    keeper = PoolKeeper(pools, store, client)
    keeper.load()  # states, counters and runtime accounts from before a restart
    if start_background:
        keeper.start()
    secrets = tuple(a.api_key for u in config.upstreams for a in u.accounts)
    hooks = HookSet()  # the operators' concerns plug in here (proxy.ops)
    relay = Relay(config, Router(config.upstreams), pools, HTTPTransport(client, pools), secrets, hooks=hooks)
    responses_store = ResponseStore(config.response_store.max_entries, config.response_store.ttl,
                                    sealer=Sealer(compaction_secret(config)))
    state = AppState(config=config, relay=relay, catalog=Catalog(config, pools, client), pools=pools,
                     response_store=responses_store, keeper=keeper, hooks=hooks)

    app = Flask("proxy")
    app.extensions["llm_proxy"] = state
    http.install(app, KeyChecker(config.client_keys), KeyChecker(config.admin_keys), config.max_body_bytes)
    for protocol in registry.all_protocols():  # each protocol's endpoint, plugins' included
        app.register_blueprint(completions_blueprint(protocol))
    app.register_blueprint(messages.bp)
    app.register_blueprint(responses.bp)
    app.register_blueprint(responses_socket.bp)
    app.register_blueprint(responses_compact.bp)
    app.register_blueprint(models.bp)
    app.register_blueprint(admin.bp)
    return app
