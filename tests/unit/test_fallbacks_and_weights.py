"""The pure parts of fallbacks and weights: the config's chains and their errors, which failures
call for a fallback, and the order weighed routes come in."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from proxy.config.load import parse
from proxy.config.values import ConfigError
from proxy.errors import ProxyError
from proxy.relay.fallbacks import REFUSED, TOO_LONG, Walk, reason_for
from proxy.routing import Router


def config(**top: Any) -> Any:
    ups = top.pop("upstreams", [{}])
    return parse({"client_keys": ["k"], "upstreams": [
        {"name": f"u{i}", "protocol": "chat_completions", "base_url": "http://127.0.0.1:9",
         "accounts": [{"id": "a", "api_key": "s"}], **extra} for i, extra in enumerate(ups)], **top})


def test_chains_match_the_first_glob_and_context_window_has_its_own() -> None:
    settings = config(fallbacks={"claude-opus-*": ["claude-sonnet-4-6", "gpt-5"], "*": "gpt-5-mini"},
                      context_window_fallbacks={"claude-*": ["gemini-2.5-pro"]}).fallbacks
    assert settings.for_model("claude-opus-4-6") == ("claude-sonnet-4-6", "gpt-5")
    assert settings.for_model("other") == ("gpt-5-mini",)
    assert settings.for_model("claude-opus-4-6", too_long=True) == ("gemini-2.5-pro",)
    assert settings.max_attempts_total == 10 and settings.max_cost_ratio is None
    walk = Walk(settings, "claude-opus-4-6")
    walk.tried.append("claude-sonnet-4-6")
    assert walk.candidates("unserved") == ["gpt-5"]


@pytest.mark.parametrize(("top", "where"), [
    ({"fallbacks": {"a": ["b*"]}}, "fallbacks.a[0]"),
    ({"fallbacks": {"a": ["b", "b"]}}, "fallbacks.a[1]"),
    ({"fallbacks": {"a": []}}, "fallbacks.a"),
    ({"max_attempts_total": 0}, "max_attempts_total"),
    ({"fallbacks_max_cost_ratio": 0}, "fallbacks_max_cost_ratio"),
    ({"upstreams": [{"weight": -1}]}, "upstreams[0].weight"),
])
def test_bad_values_name_the_key(top: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError) as err:
        config(**top)
    assert str(err.value).startswith(where)


def test_which_failures_another_model_could_fix() -> None:
    assert reason_for(ProxyError(400, "too long", "invalid_request"), "request_too_large") == TOO_LONG
    assert reason_for(ProxyError(404, "no such model", "not_found"), "other") == REFUSED
    assert reason_for(ProxyError(503, "overloaded", "unavailable"), "other") == REFUSED
    assert reason_for(ProxyError(400, "temperature", "invalid_request"), "other") is None
    assert reason_for(ProxyError(500, "boom", "api_error"), "other") is None
    assert reason_for(ProxyError(404, "no route", "not_found"), None) is None  # no attempt: the proxy's own


def test_weights_take_turns_exactly_and_weight_zero_comes_last() -> None:
    router = Router(config(upstreams=[{"weight": 3}, {}, {"weight": 0}]).upstreams)
    firsts = Counter(router.routes_to_try("m")[0].upstream.name for _ in range(1000))
    assert firsts == {"u0": 750, "u1": 250}
    assert [r.upstream.name for r in router.routes_to_try("m")][2] == "u2"
    assert [r.upstream.name for r in router.resolve("m")] == ["u0", "u1", "u2"]  # config order, no turn taken
    plain = Router(config(upstreams=[{}, {}]).upstreams)
    assert {plain.routes_to_try("m")[0].upstream.name for _ in range(10)} == {"u0"}  # every weight 1: config order


def test_check_config_refuses_a_fallback_no_upstream_serves() -> None:
    from proxy.serving.config_check import checked
    text = ("client_keys: [k]\nupstreams:\n  - {name: u, protocol: chat_completions, base_url: 'http://127.0.0.1:9',"
            " models: {serve: ['gpt-*']}, accounts: [{id: a, api_key: s}]}\n")
    assert checked("c.yaml", text + "fallbacks: {gpt-5: [gpt-5-mini]}\n").fallbacks.for_model("gpt-5") == ("gpt-5-mini",)
    with pytest.raises(ConfigError) as err:
        checked("c.yaml", text + "fallbacks: {gpt-5: [gpt-5-mini, claude-sonnet-4-6]}\n")
    assert str(err.value).startswith("fallbacks.gpt-5[1]") and "'claude-sonnet-4-6'" in str(err.value)
