"""Shared by the tests of non-Chat upstreams (test_anthropic_upstream.py, test_responses_upstream.py):
a proxy in front of the demo speaking one upstream protocol, SDK clients, and the check that a
failing account makes the pool move on — judged by what reached the upstream, not only by what
the client got."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from anthropic import Anthropic
from openai import OpenAI

from proxy.demo.scenarios import ANSWER
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY, account, admin

WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@contextlib.contextmanager
def upstream_proxy(demo: DemoUpstream, tmp: Path, protocol: str, name: str, keys: tuple[str, ...],
                   **upstream: Any) -> Iterator[ProxyServer]:
    """The proxy with one upstream of `protocol` (accounts NAME-0, NAME-1, …) and the admin API;
    stopped afterwards, and the demo's per-key faults cleared."""
    config = {"client_keys": [CLIENT_KEY], "admin_keys": [ADMIN_KEY], "upstreams": [{
        "name": name, "protocol": protocol, "base_url": demo.url, "pool": {"probe": {"interval": 3600}},
        "accounts": [{"id": f"{name}-{i}", "api_key": key} for i, key in enumerate(keys)], **upstream}]}
    server = start_proxy(config, tmp)
    try:
        yield server
    finally:
        stop_proxy(server)
        demo.control("/_demo/keys", method="DELETE")


@contextlib.contextmanager
def proxy_speaking(protocol: str, demo: DemoUpstream, tmp: Path, **overrides: Any) -> Iterator[ProxyServer]:
    """The tests' usual proxy (conftest.base_config, with `overrides`) with its upstream speaking
    `protocol`: for a module-scoped fixture parametrised over the upstream protocols."""
    config = base_config(demo.url, **overrides)
    config["upstreams"][0]["protocol"] = protocol
    if protocol == "gemini":  # the API root: the proxy adds /v1beta
        config["upstreams"][0]["base_url"] = demo.root
    server = start_proxy(config, tmp)
    try:
        yield server
    finally:
        stop_proxy(server)


def only_request(demo: DemoUpstream, request_id: str, path: str) -> dict[str, Any]:
    """The one request the upstream saw under `request_id`; it went to `path`."""
    (record,) = demo.requests(request_id)
    assert record["path"] == path
    return record


def rid() -> str:
    return "up-" + uuid.uuid4().hex


def openai_client(proxy: ProxyServer) -> OpenAI:
    return OpenAI(base_url=f"{proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)


def anthropic_client(proxy: ProxyServer) -> Anthropic:
    return Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0, timeout=20)


def words(n: int) -> str:
    """The first n words of the demo's answer, as it streams them (each followed by a space)."""
    return "".join(f"{word} " for word in ANSWER.split()[:n])


def assert_pool_moves_on(proxy: ProxyServer, demo: DemoUpstream, name: str, keys: tuple[str, ...],
                         status: int, error: dict[str, Any], send: Callable[[str], None], state_after: str) -> None:
    """The first account answers `status` with `error`: two requests (`send(request_id)` makes one and
    checks the client's answer) are both served, one of them after the upstream saw the failing key
    and then the other, and the failing account ends `state_after`."""
    demo.control("/_demo/keys", body={keys[0]: {"status": status, "body": json.dumps(error),
                                                 "headers": {"Content-Type": "application/json"}}})
    try:
        request_ids = [rid(), rid()]
        for request_id in request_ids:
            send(request_id)
        presented = [[record["key"] for record in demo.requests(request_id)] for request_id in request_ids]
        assert [keys[0], keys[1]] in presented, presented  # tried, failed, and the next account served it
        assert account(proxy, name, f"{name}-0")["status"] == state_after
    finally:
        demo.control("/_demo/keys", method="DELETE")
        admin(proxy, "POST", f"/admin/accounts/{name}/{name}-0/enable")
