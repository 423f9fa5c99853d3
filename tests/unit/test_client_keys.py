"""Named client keys: the `client_keys` entries (plain strings or {name, key, models, disabled}),
config errors that name the entry without quoting a key, the constant-time match that says which
key a request presented, and the model check."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.blueprints.auth import KeyChecker, check_model, key_name
from proxy.config import ConfigError, parse
from proxy.errors import ProxyError
from proxy.protocols.messages.errors import error_body as messages_error
from proxy.protocols.openai_errors import error_body as openai_error

UPSTREAMS = [{"name": "main", "protocol": "chat_completions", "base_url": "http://127.0.0.1:9000/v1",
              "accounts": [{"id": "a", "api_key": "sk-up-1"}]}]


def keys(entries: Any) -> Any:
    return parse({"client_keys": entries, "upstreams": UPSTREAMS}).client_keys


def test_plain_and_named_keys_side_by_side() -> None:
    plain, alice, ci = keys(["sk-plain-key", {"name": "alice", "key": "sk-alice-key"},
                             {"name": "ci-bot", "key": "sk-ci-key", "models": ["gpt-4o*", "claude-?-haiku"],
                              "disabled": True}])
    assert (plain.name, plain.key, plain.models, plain.disabled) == (key_name("sk-plain-key"), "sk-plain-key",
                                                                     None, False)
    assert plain.name.startswith("key-") and len(plain.name) == 12 and "sk-plain" not in plain.name
    assert (alice.name, alice.models, alice.disabled) == ("alice", None, False)
    assert (ci.name, ci.models, ci.disabled) == ("ci-bot", ("gpt-4o*", "claude-?-haiku"), True)
    assert alice.allows("anything-at-all")
    assert ci.allows("gpt-4o-mini") and ci.allows("claude-3-haiku")
    assert not ci.allows("gpt-4.1") and not ci.allows("GPT-4o")  # globs are case-sensitive, as `serve` is
    assert "sk-" not in repr(keys([{"name": "alice", "key": "sk-alice-key"}]))
    assert keys("sk-single")[0].key == "sk-single"  # a single string is still accepted


@pytest.mark.parametrize(("entries", "message"), [
    ([], "client_keys: must list at least one key"),
    ({"alice": "sk-1"}, "client_keys[0].alice: unknown key; expected one of budget, disabled, key, limits, models, name"),
    ([{"key": "sk-alice-key"}], "client_keys[0].name: is required"),
    ([{"name": "alice"}], "client_keys[0].key: is required"),
    ([{"name": "alice", "key": "sk-a", "model": ["x"]}], "client_keys[0].model: unknown key"),
    ([{"name": "has space", "key": "sk-a"}], "client_keys[0].name: must be 1 to 64 letters, digits"),
    ([{"name": "sk-a", "key": "sk-a"}], "client_keys[0].name: must not be the key itself"),
    ([{"name": "alice", "key": "sk-a", "disabled": "yes"}], "client_keys[0].disabled: must be true or false"),
    ([{"name": "alice", "key": "sk-a", "models": []}], "client_keys[0].models: must be a non-empty list"),
    ([{"name": "alice", "key": "sk-a", "models": "gpt-*"}, "sk-b",
      {"name": "bob", "key": "sk-c", "models": ["gpt-*", "[claude"]}],
     "client_keys[2].models[1]: '[' opens a character class that is never closed"),
    ([{"name": "alice", "key": "sk-a", "models": ["gpt]"]}], "client_keys[0].models[0]: ']' closes a character"),
    ([{"name": "alice", "key": "sk-a", "models": ["gpt 4"]}], "client_keys[0].models[0]: a model name pattern "
                                                                "has no spaces"),
    ([{"name": "alice", "key": "sk-a", "models": [3]}], "client_keys[0].models[0]: must be a model name pattern"),
    (["sk-a", "sk-b", "sk-a"], "client_keys[2]: the same key as client_keys[0]: each key may be listed once"),
    (["sk-secret-a", {"name": "bob", "key": "sk-secret-a"}], "client_keys[1].key: the same key as client_keys[0]"),
    ([{"name": "bob", "key": "sk-a"}, {"name": "bob", "key": "sk-b"}],
     "client_keys[1].name: the name 'bob' is already used by client_keys[0]"),
    (["sk-a", {"name": key_name("sk-a"), "key": "sk-b"}], f"client_keys[1].name: the name '{key_name('sk-a')}' "
                                                          "is already used by client_keys[0]"),
])
def test_config_errors_name_the_entry(entries: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        keys(entries)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "sk-secret" not in str(caught.value)  # a key is never quoted back


def test_glob_classes_that_are_well_formed_are_accepted() -> None:
    (entry,) = keys([{"name": "a", "key": "sk-a", "models": ["gpt-[34]*", "o[!2]-mini", "x[]]y"]}])
    assert entry.allows("gpt-4o") and entry.allows("o3-mini") and not entry.allows("o2-mini") and entry.allows("x]y")


def test_the_checker_says_which_key_matched() -> None:
    entries = keys(["sk-plain-key", {"name": "alice", "key": "sk-alice-key"},
                    {"name": "off", "key": "sk-off-key", "disabled": True}])
    checker = KeyChecker(entries)
    assert checker.match("sk-alice-key") is entries[1]
    assert checker.match("sk-plain-key") is entries[0]
    assert checker.match("sk-off-key") is entries[2]  # found, and disabled: the edge answers 401 by name
    assert checker.match("sk-alice-ke") is None and checker.match("") is None and checker.match(None) is None
    assert checker.check("sk-alice-key") and not checker.check("sk-off-key") and not checker.check("nope")
    admin = KeyChecker(["sk-admin-key"])  # admin keys stay plain strings
    assert admin.match("sk-admin-key") is not None and admin.match("sk-admin-key").name == key_name("sk-admin-key")
    assert KeyChecker([]).empty and not admin.empty


def test_a_model_outside_the_keys_list_is_refused_in_each_protocols_words() -> None:
    (entry,) = keys([{"name": "ci-bot", "key": "sk-ci-secret", "models": ["gpt-4o*"]}])
    check_model(entry, "gpt-4o-mini")
    check_model(None, "anything")  # no key (an open endpoint): nothing to check
    with pytest.raises(ProxyError) as caught:
        check_model(entry, "claude-opus-4")
    info = caught.value.info
    assert info.status == 403 and "'claude-opus-4'" in info.message and "gpt-4o*" in info.message
    assert "ci-bot" in info.message and "sk-ci-secret" not in info.message
    assert messages_error(info)["error"]["type"] == "permission_error"
    openai = openai_error(info)["error"]
    assert (openai["code"], openai["type"], openai["param"]) == ("model_not_allowed", "permission_error", "model")
