"""Config loading: the documented keys, ${VAR} expansion, and errors that name the key."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.config import ConfigError, load, parse
from proxy.protocols import registry

MINIMAL: dict[str, Any] = {
    "client_keys": ["sk-client-test"],
    "upstreams": [{"name": "main", "protocol": "chat_completions", "base_url": "http://127.0.0.1:9000/v1",
                   "accounts": [{"id": "acct-1", "api_key": "sk-up-1"}, {"id": "acct-2", "api_key": "sk-up-2"}]}],
}


def with_(path: str, value: Any) -> dict[str, Any]:
    doc = yaml.safe_load(yaml.safe_dump(MINIMAL))
    node = doc
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return doc


_DELETE = object()


def test_the_issue_example_parses_with_defaults() -> None:
    config = parse(MINIMAL)
    assert [(k.key, k.name, k.models, k.disabled) for k in config.client_keys] == [
        ("sk-client-test", "key-ae09045e", None, False)]  # a plain key: named by a hash prefix, every model
    (up,) = config.upstreams
    assert (up.name, up.protocol, up.base_url) == ("main", "chat_completions", "http://127.0.0.1:9000/v1")
    assert [a.id for a in up.accounts] == ["acct-1", "acct-2"]
    assert config.max_body_bytes == 32 * 2**20
    assert config.streaming.keepalive_interval == 10 and config.streaming.idle_timeout == 300
    assert config.model_list_ttl == 300
    assert up.models.serve == ("*",) and not up.models.aliases


def test_api_keys_never_show_in_reprs() -> None:
    assert "sk-up-1" not in repr(parse(MINIMAL)) and "sk-client-test" not in repr(parse(MINIMAL))


def test_env_vars_expand_with_defaults() -> None:
    doc = with_("upstreams.0.accounts.0.api_key", "${UP_KEY}")
    doc["upstreams"][0]["base_url"] = "${BASE:-http://localhost:1/v1}"
    config = parse(doc, environ={"UP_KEY": "sk-from-env"})
    assert config.upstreams[0].accounts[0].api_key == "sk-from-env"
    assert config.upstreams[0].base_url == "http://localhost:1/v1"


@pytest.mark.parametrize(("doc", "message"), [
    (with_("upstreams.0.accounts.0.api_key", "${NOPE}"),
     "upstreams[0].accounts[0].api_key: environment variable NOPE is not set"),
    (with_("client_keys", []), "client_keys: must list at least one key"),
    (with_("upstreams", []), "upstreams: must be a non-empty list"),
    (with_("upstreams.0.protocol", "grpc"), "upstreams[0].protocol: must be one of chat_completions, gemini, "
     "messages, responses (got 'grpc')"),
    (with_("protocol_plugins", ["no_such_module_anywhere"]), "protocol_plugins[0]: cannot import "
     "'no_such_module_anywhere'"),
    (with_("protocol_plugins", ["not a module"]), "protocol_plugins[0]: must be a Python module name"),
    (with_("upstreams.0.base_url", "localhost:9000"), "upstreams[0].base_url: must be an http:// or https:// URL"),
    (with_("upstreams.0.accounts.1.api_key", _DELETE), "upstreams[0].accounts[1].api_key: is required"),
    (with_("upstreams.0.acounts", []), "upstreams[0].acounts: unknown key; expected one of accounts,"),
    (with_("upstreams.0.accounts.1.id", "acct-1"), "upstreams[0].accounts[1].id: duplicate account id 'acct-1'"),
    (with_("max_body_bytes", "lots"), "max_body_bytes: must be a size such as 33554432 or '32MiB'"),
    (with_("streaming", {"keepalive_interval": "soon"}), "streaming.keepalive_interval: must be a number"),
    (with_("timeouts", {"read": -1}), "timeouts.read: must be at least 0.001"),
    (with_("timeouts", {"first_byte": "soon"}), "timeouts.first_byte: must be a number (got 'soon')"),
    (with_("timeouts", {"first_byte_total": 0}), "timeouts.first_byte_total: must be at least 0.001"),
    (with_("upstreams.0.timeouts", {"first_byte": -2}), "upstreams[0].timeouts.first_byte: must be at least 0.001"),
    (with_("upstreams.0.timeouts", {"first_byte_total": 30}),
     "upstreams[0].timeouts.first_byte_total: bounds a client's whole wait, across every upstream its model is "
     "routed to: set it once, under the top-level timeouts"),
    (with_("timeouts", {"first_bytes": 5}), "timeouts.first_bytes: unknown key; expected one of connect, first_byte, "
                                            "first_byte_total, read"),
    (with_("upstreams.0.models", {"serve": "gpt-*", "aliases": ["x"]}), "upstreams[0].models.aliases: must be a mapping"),
    (with_("upstreams.0.accounts.0.proxy", "ftp://u:pw@h:21"), "upstreams[0].accounts[0].proxy: must be a URL such as "
     "'http://host:3128' with a scheme among http, https, socks5, socks5h (got 'ftp://h:21')"),
    (with_("upstreams.0.accounts.0.proxy", ["http://h:1", "http://h:port"]),
     "upstreams[0].accounts[0].proxy[1]: is not a valid proxy URL"),
    (with_("upstreams.0.accounts.0.proxy", []), "upstreams[0].accounts[0].proxy: must be a proxy URL such as "
     "'http://127.0.0.1:3128', or a non-empty list of them"),
    (with_("proxies", ["http://user:pw@h:1/path"]), "proxies[0]: must name the proxy only, "
     "scheme://[user:password@]host:port (got 'http://h:1')"),
    (with_("upstreams.0.reasoning", {"passback": "sometimes"}),
     "upstreams[0].reasoning.passback: must be auto, true or false (got 'sometimes')"),
])
def test_errors_name_the_key_and_the_problem(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        registry.resolve(parse(doc, environ={}))  # the protocol names are the registry's to check
    assert str(caught.value).startswith(message), str(caught.value)


def test_older_protocol_names_still_work_and_say_they_are_deprecated(caplog: pytest.LogCaptureFixture) -> None:
    doc = with_("upstreams.0.protocol", "openai")
    doc["upstreams"].append({**doc["upstreams"][0], "name": "claude", "protocol": "anthropic"})
    with caplog.at_level(logging.WARNING, logger="proxy.protocols.registry"):
        config = registry.resolve(parse(doc))
    assert [u.protocol for u in config.upstreams] == ["chat_completions", "messages"]
    assert [r.getMessage() for r in caplog.records] == [
        "upstreams[0].protocol: 'openai' is deprecated, write 'chat_completions' (same protocol)",
        "upstreams[1].protocol: 'anthropic' is deprecated, write 'messages' (same protocol)"]


def test_first_byte_timeouts_default_and_override() -> None:
    config = parse(MINIMAL)
    assert config.timeouts.first_byte_total == 60
    up = config.upstreams[0].timeouts
    assert (up.header_wait(stream=True), up.header_wait(stream=False)) == (30, 300)
    # A read timeout below the default first_byte bounds a stream's wait for headers too.
    assert parse(with_("timeouts", {"read": 5})).upstreams[0].timeouts.header_wait(stream=True) == 5
    doc = with_("timeouts", {"first_byte": 12, "first_byte_total": 40})
    doc["upstreams"][0]["timeouts"] = {"read": 90}
    doc["upstreams"].append({**doc["upstreams"][0], "name": "other", "timeouts": {"first_byte": 3}})
    config = parse(doc)
    assert config.timeouts.first_byte_total == 40
    main, other = (u.timeouts for u in config.upstreams)
    assert (main.header_wait(stream=True), main.header_wait(stream=False)) == (12, 90)  # inherited, own read
    assert (other.header_wait(stream=True), other.header_wait(stream=False)) == (3, 300)


def test_proxies_per_account_and_at_top_level() -> None:
    doc = with_("proxies", ["http://top:3128"])
    doc["upstreams"][0]["accounts"][0]["proxy"] = "http://u:pw@one:3128"
    doc["upstreams"][0]["accounts"][1]["proxy"] = ["http://a:1", "socks5h://b:1080"]
    config = parse(doc)
    up = config.upstreams[0]
    assert [a.proxies for a in up.accounts] == [("http://u:pw@one:3128",), ("http://a:1", "socks5h://b:1080")]
    assert up.proxies == config.proxies == ("http://top:3128",)
    assert "pw@" not in repr(config)


def test_a_socks_proxy_without_pysocks_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "socks" else real(name, *a))
    with pytest.raises(ConfigError) as caught:
        parse(with_("upstreams.0.accounts.0.proxy", "socks5://h:1080"))
    assert str(caught.value) == ("upstreams[0].accounts[0].proxy: SOCKS proxies need the PySocks package: "
                                 "pip install 'llm-proxy[socks]' (or pip install PySocks)")


def test_reasoning_passback_is_auto_unless_forced() -> None:
    assert parse(MINIMAL).upstreams[0].reasoning.passback == "auto"
    for value, mode in (("auto", "auto"), (True, "always"), (False, "never")):
        assert parse(with_("upstreams.0.reasoning", {"passback": value})).upstreams[0].reasoning.passback == mode


def test_sizes_accept_units() -> None:
    assert parse(with_("max_body_bytes", "2MiB")).max_body_bytes == 2 * 2**20
    assert parse(with_("max_body_bytes", "500 KB")).max_body_bytes == 500_000


def test_load_reports_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("client_keys: [a\nupstreams: {")
    with pytest.raises(ConfigError, match=r"is not valid YAML \(line \d+, column \d+\)"):
        load(str(bad))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.serving.cli", *args], capture_output=True, text=True, timeout=60)


def test_check_config_ok_and_invalid_exit_codes(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(MINIMAL))
    ok = run_cli("check-config", str(good))
    assert ok.returncode == 0 and "OK (1 upstream(s), 2 account(s))" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(with_("upstreams.0.protocol", "grpc")))
    for args in (("check-config", str(bad)), ("serve", "--config", str(bad), "--bind", "127.0.0.1:1")):
        result = run_cli(*args)
        assert result.returncode == 2
        assert result.stderr.strip().startswith("llm-proxy: config error: upstreams[0].protocol: must be one of")
        assert "Traceback" not in result.stderr


QUEUE_SIZE_WARNING = ("streaming.queue_size: has no effect and is deprecated (a stream reads the upstream only after "
                      "the client's socket took the previous frames, so memory per stream is one read whatever the "
                      "value); remove it from the config")


def test_queue_size_is_still_accepted_and_said_to_have_no_effect(tmp_path: Path) -> None:
    assert parse(MINIMAL).deprecated == ()
    old = with_("streaming", {"queue_size": 64, "keepalive_interval": 5})
    config = parse(old)
    assert config.deprecated == (QUEUE_SIZE_WARNING,)
    assert config.streaming.keepalive_interval == 5  # the rest of the section still applies
    with pytest.raises(ConfigError, match=r"^streaming.queue_size: must be "):  # checked as before
        parse(with_("streaming", {"queue_size": 0}))
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(old))
    result = run_cli("check-config", str(path))
    assert result.returncode == 0 and "OK (1 upstream(s), 2 account(s))" in result.stdout
    assert result.stderr.splitlines() == [f"llm-proxy: config warning: {QUEUE_SIZE_WARNING}"]


def test_gunicorn_with_an_invalid_config_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(with_("upstreams.0.protocol", "grpc")))
    root = Path(__file__).resolve().parent.parent.parent
    for env in ({"LLM_PROXY_CONFIG": str(bad)}, {}):
        result = subprocess.run([sys.executable, "-m", "gunicorn", "-c", str(root / "gunicorn.conf.py"),
                                 "--bind", "127.0.0.1:0", "proxy.wsgi:app"], capture_output=True, text=True,
                                timeout=60, cwd=root, env={k: v for k, v in os.environ.items()
                                                            if k != "LLM_PROXY_CONFIG"} | env)
        assert result.returncode == 2
        assert "llm-proxy: config error:" in result.stderr and "Traceback" not in result.stderr
