"""The model catalog behind `GET /v1/models`: each upstream's own list, fetched with one of its
accounts and cached per upstream, merged with the configured aliases.

Owns the cache (TTL from `model_list_ttl`; a failed fetch is retried after a short back-off and
meanwhile the last good list, if any, is served) and the list's wire shape, a union that both the
OpenAI and the Anthropic SDK parse (docs/protocols.md §14; `has_more: false` stops the Anthropic SDK
from paginating forever).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from proxy.config import Config, Upstream
from proxy.pool.pool import AccountPool
from proxy.protocols import registry
from proxy.upstream.client import Target, UpstreamClient, UpstreamNetworkError, read_capped
from proxy.upstream.outbound import ProxiesExhausted, send_via_proxies

log = logging.getLogger(__name__)

FAILURE_BACKOFF = 30.0  # seconds before retrying a model list that failed to load


@dataclass(frozen=True)
class Model:
    id: str
    owned_by: str
    created: int


@dataclass
class _Cached:
    models: list[Model]
    expires: float


class Catalog:
    def __init__(self, config: Config, pools: dict[str, AccountPool], client: UpstreamClient,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._pools = pools
        self._client = client
        self._clock = clock
        self._cache: dict[str, _Cached] = {}
        self._locks = {u.name: threading.Lock() for u in config.upstreams}  # one fetch per upstream at a time
        self._started = int(time.time())

    def models(self, request_id: str | None = None) -> list[Model]:
        seen: set[str] = set()
        merged: list[Model] = []
        for upstream in self._config.upstreams:
            names = [Model(alias, upstream.name, self._started) for alias in upstream.models.aliases]
            if upstream.models.list_upstream:
                names += self._upstream_models(upstream, request_id)
            for model in names:
                if model.id not in seen:
                    seen.add(model.id)
                    merged.append(model)
        return merged

    def _upstream_models(self, upstream: Upstream, request_id: str | None) -> list[Model]:
        cached = self._cache.get(upstream.name)
        if cached is not None and cached.expires > self._clock():
            return cached.models
        with self._locks[upstream.name]:
            cached = self._cache.get(upstream.name)
            if cached is not None and cached.expires > self._clock():
                return cached.models  # another request fetched it while we waited
            models = self._fetch(upstream, request_id)
            if models is None:
                stale = cached.models if cached is not None else []
                self._cache[upstream.name] = _Cached(stale, self._clock() + FAILURE_BACKOFF)
                return stale
            self._cache[upstream.name] = _Cached(models, self._clock() + self._config.model_list_ttl)
            return models

    def _fetch(self, upstream: Upstream, request_id: str | None) -> list[Model] | None:
        side = registry.get(upstream.protocol).upstream
        lease = self._pools[upstream.name].lease(set())
        if lease is None:
            log.warning("model list of upstream %s: no account available", upstream.name)
            return None
        def send(proxy: str | None) -> Any:
            target = Target.of(upstream, lease.account.api_key, proxy)
            return self._client.send(target, side.models_path, None, stream=True, method="GET", request_id=request_id)

        try:
            resp = send_via_proxies(self._pools[upstream.name], lease.account, send, request_id)
        except (UpstreamNetworkError, ProxiesExhausted) as exc:
            lease.release(failure="network" if isinstance(exc, UpstreamNetworkError) else None)
            log.warning("model list of upstream %s: %s", upstream.name, exc.info.message)
            return None
        raw = read_capped(resp, 16 << 20)
        lease.release(failure=None if resp.status_code == 200 else "models")
        if resp.status_code != 200:
            log.warning("model list of upstream %s: HTTP %d", upstream.name, resp.status_code)
            return None
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if side.model_ids is not None:  # the protocol's own list shape (Gemini's `models[].name`)
            ids = side.model_ids(doc)
            if ids is None:
                log.warning("model list of upstream %s: unexpected body", upstream.name)
                return None
            return [Model(i, upstream.name, self._started) for i in ids]
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list):
            log.warning("model list of upstream %s: unexpected body", upstream.name)
            return None
        models = []
        for entry in data:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                created = entry.get("created")
                models.append(Model(entry["id"], upstream.name,
                                    created if isinstance(created, int) else self._started))
        return models


def model_object(model: Model) -> dict[str, Any]:
    created_at = datetime.fromtimestamp(model.created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"id": model.id, "object": "model", "type": "model", "created": model.created,
            "created_at": created_at, "owned_by": model.owned_by, "display_name": model.id}


def model_list(models: list[Model]) -> dict[str, Any]:
    data = [model_object(m) for m in models]
    return {"object": "list", "data": data, "has_more": False,
            "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None}
