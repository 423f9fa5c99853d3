"""What a config builds in a worker, apart from what lives as long as the worker: the pools, the
router and relay, the model catalog, the token counter, the key checkers and the price book (`config_parts`).

Owns that list, for the app factory (proxy.serving.app) at start and for a reload
(proxy.serving.reconfigure), which builds it again and swaps it into the app's `AppState`.
"""

from __future__ import annotations

from typing import TypedDict

from proxy.blueprints.auth import KeyChecker
from proxy.config import Config
from proxy.money.prices import PriceBook
from proxy.ops.hooks import HookSet
from proxy.pool.pool import AccountPool
from proxy.relay.affinity import Affinity
from proxy.relay.loop import Relay
from proxy.relay.transport import HTTPTransport
from proxy.routing import Router
from proxy.upstream.catalog import Catalog
from proxy.upstream.client import UpstreamClient
from proxy.upstream.keeper import PoolKeeper
from proxy.upstream.token_count import TokenCounter


class ConfigParts(TypedDict):
    """The `AppState` fields a config builds (and a reload builds again)."""

    config: Config
    relay: Relay
    catalog: Catalog
    tokens: TokenCounter
    pools: dict[str, AccountPool]
    client_keys: KeyChecker
    admin_keys: KeyChecker
    prices: PriceBook


def config_parts(config: Config, keeper: PoolKeeper, client: UpstreamClient, hooks: HookSet,
                 reload: bool = False, affinity: Affinity | None = None) -> ConfigParts:
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
    return ConfigParts(config=config, relay=relay, catalog=Catalog(config, pools, client),
                       tokens=TokenCounter(pools, client), pools=pools,
                       client_keys=KeyChecker(config.client_keys), admin_keys=KeyChecker(config.admin_keys),
                       prices=PriceBook(config))
