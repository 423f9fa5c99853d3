"""The `state:` section: sqlite by default, redis with a URL; every mistake named by its key, and a
password never shown."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import ConfigError, parse
from proxy.config.state import redact_url
from proxy.state.redis_connection import key

MINIMAL: dict[str, Any] = {
    "client_keys": ["sk-c"],
    "upstreams": [{"name": "u", "protocol": "chat_completions", "base_url": "http://127.0.0.1:9/v1",
                   "accounts": [{"id": "a", "api_key": "sk-a"}]}],
}


def with_state(state: Any) -> dict[str, Any]:
    return {**MINIMAL, "state": state}


def test_sqlite_is_the_default() -> None:
    config = parse(MINIMAL)
    assert (config.state.backend, config.state.url, config.state.prefix) == ("sqlite", None, "llm-proxy:")


def test_redis_with_a_password_from_the_environment() -> None:
    config = parse(with_state({"backend": "redis", "url": "rediss://proxy:${REDIS_PASSWORD}@redis.internal:6380/2",
                               "prefix": "team-a:"}), environ={"REDIS_PASSWORD": "s3cret"})
    assert config.state.backend == "redis" and config.state.url == "rediss://proxy:s3cret@redis.internal:6380/2"
    assert config.state.shown_url == "rediss://proxy:***@redis.internal:6380/2"
    assert "s3cret" not in repr(config)
    assert key(config.state, "account", "u", "a") == "team-a:account:u:a"


@pytest.mark.parametrize(("state", "where", "says"), [
    ({"backend": "redis"}, "state.url", "is required with backend: redis"),
    ({"backend": "redis", "url": "http://:pw@host:6379"}, "state.url", "must start with redis://"),
    ({"backend": "sqlite", "url": "redis://host"}, "state.url", "only for backend: redis"),
    ({"backend": "memcached"}, "state.backend", "must be one of"),
    ({"backnd": "redis"}, "state.backnd", "unknown key"),
    ("redis", "state", "must be a mapping"),
])
def test_mistakes_are_named_by_their_key(state: Any, where: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(with_state(state))
    assert str(caught.value).startswith(where) and says in str(caught.value)
    assert "pw" not in str(caught.value)


def test_a_url_without_a_password_is_shown_as_it_is() -> None:
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert redact_url("redis://:pw@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"


def test_sentinel_instead_of_a_url_with_passwords_from_the_environment() -> None:
    config = parse(with_state({"backend": "redis", "sentinel": {
        "hosts": ["10.0.0.5:26379", "10.0.0.6:26379", "[::1]:26380"], "service_name": "llmproxy",
        "password": "${REDIS_PASSWORD}", "sentinel_password": "${SENTINEL_PASSWORD}", "db": 2}}),
        environ={"REDIS_PASSWORD": "s3cret", "SENTINEL_PASSWORD": "s3ntinel"})
    sentinel = config.state.sentinel
    assert sentinel is not None and config.state.url is None
    assert sentinel.hosts == (("10.0.0.5", 26379), ("10.0.0.6", 26379), ("::1", 26380))
    assert (sentinel.service_name, sentinel.password, sentinel.sentinel_password, sentinel.db, sentinel.tls) == (
        "llmproxy", "s3cret", "s3ntinel", 2, False)
    shown = config.state.shown_url or ""
    assert "llmproxy" in shown and "10.0.0.5:26379" in shown
    assert "s3cret" not in repr(config) + shown and "s3ntinel" not in repr(config) + shown


@pytest.mark.parametrize(("sentinel", "where", "says"), [
    ({"service_name": "x"}, "state.sentinel.hosts", 'must list the sentinels as "host:port"'),
    ({"hosts": [], "service_name": "x"}, "state.sentinel.hosts", "must list the sentinels"),
    ({"hosts": ["10.0.0.5"], "service_name": "x"}, "state.sentinel.hosts[0]", 'must be "host:port"'),
    ({"hosts": ["10.0.0.5:99999"], "service_name": "x"}, "state.sentinel.hosts[0]", 'must be "host:port"'),
    ({"hosts": ["10.0.0.5:26379"]}, "state.sentinel.service_name", "is required"),
    ({"hosts": ["10.0.0.5:26379"], "service_name": "x", "pasword": "pw"}, "state.sentinel.pasword", "unknown key"),
])
def test_sentinel_mistakes_are_named_by_their_key(sentinel: Any, where: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(with_state({"backend": "redis", "sentinel": sentinel}))
    assert str(caught.value).startswith(where) and says in str(caught.value)
    assert "pw" not in str(caught.value).replace("pasword", "")


def test_sentinel_and_url_together_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^state\.sentinel: and state\.url are two ways to find Redis"):
        parse(with_state({"backend": "redis", "url": "redis://h", "sentinel": {"hosts": ["h:1"], "service_name": "x"}}))
    with pytest.raises(ConfigError, match=r"^state\.sentinel: is only for backend: redis"):
        parse(with_state({"sentinel": {"hosts": ["h:1"], "service_name": "x"}}))
