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
