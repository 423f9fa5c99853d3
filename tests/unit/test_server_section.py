"""The config's `server:` section (forwarded_allow_ips, tls) and the client address taken from
X-Forwarded-For only for a trusted peer (proxy/serving/forwarded.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.config import ConfigError, parse
from proxy.serving import forwarded
from proxy.serving.settings import settings

UPSTREAMS = [{"name": "u", "protocol": "chat_completions", "base_url": "http://127.0.0.1:1/v1",
              "accounts": [{"id": "a", "api_key": "sk-x"}]}]


def config(**server: Any) -> Any:
    return parse({"client_keys": ["sk-c"], "upstreams": UPSTREAMS, "server": server})


def test_defaults_trust_loopback_and_serve_plain_http() -> None:
    c = parse({"client_keys": ["sk-c"], "upstreams": UPSTREAMS})
    assert c.server.forwarded_allow_ips == ("127.0.0.1", "::1") and c.server.tls is None


def test_forwarded_allow_ips_takes_addresses_networks_star_or_nothing() -> None:
    assert config(forwarded_allow_ips=["10.0.0.0/8", "fd00::/8", "192.0.2.7"]).server.forwarded_allow_ips == (
        "10.0.0.0/8", "fd00::/8", "192.0.2.7")
    assert config(forwarded_allow_ips="127.0.0.1, 10.1.0.0/16").server.forwarded_allow_ips == (
        "127.0.0.1", "10.1.0.0/16")
    assert config(forwarded_allow_ips=["*"]).server.forwarded_allow_ips == ("*",)
    assert config(forwarded_allow_ips=[]).server.forwarded_allow_ips == ()


@pytest.mark.parametrize("value, key, words", [
    (["nginx.local"], "server.forwarded_allow_ips[0]", "IP address or a network"),
    (["10.0.0.1/8"], "server.forwarded_allow_ips[0]", "no host bits"),
    ({"a": 1}, "server.forwarded_allow_ips", "must be a list"),
])
def test_a_bad_forwarded_allow_ips_names_its_key(value: Any, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(forwarded_allow_ips=value)
    assert caught.value.path == key and words in str(caught.value)


def test_tls_files_must_exist(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError) as caught:
        config(tls={"certfile": str(cert), "keyfile": str(key)})
    assert caught.value.path == "server.tls.keyfile" and "does not exist" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        config(tls={"certfile": str(cert)})
    assert caught.value.path == "server.tls.keyfile" and "required" in str(caught.value)
    key.write_text("x")
    tls = config(tls={"certfile": str(cert), "keyfile": str(key)}).server.tls
    assert tls.certfile == str(cert) and tls.keyfile == str(key)


def test_gunicorn_gets_the_server_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    (tmp_path / "c.pem").write_text("x")
    (tmp_path / "k.pem").write_text("x")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"client_keys": ["sk-c"], "upstreams": UPSTREAMS, "state_path": None,
                                    "server": {"forwarded_allow_ips": ["10.0.0.0/8"],
                                               "tls": {"certfile": str(tmp_path / "c.pem"),
                                                       "keyfile": str(tmp_path / "k.pem")}}}))
    monkeypatch.setenv("LLM_PROXY_CONFIG", str(path))
    options = settings()
    assert options["forwarded_allow_ips"] == "10.0.0.0/8"
    assert options["certfile"] == str(tmp_path / "c.pem") and options["keyfile"] == str(tmp_path / "k.pem")


LOOPBACK = forwarded.Trusted(["127.0.0.1", "::1"])


@pytest.mark.parametrize("peer, header, trusted, expected", [
    ("127.0.0.1", "203.0.113.9", LOOPBACK, "203.0.113.9"),  # nginx on loopback, what it saw
    ("127.0.0.1", "6.6.6.6, 203.0.113.9", LOOPBACK, "203.0.113.9"),  # a spoofed hop left of nginx's
    ("127.0.0.1", "203.0.113.9, 127.0.0.1", LOOPBACK, "203.0.113.9"),  # two trusted proxies in a row
    ("127.0.0.1", "127.0.0.1, ::1", LOOPBACK, "127.0.0.1"),  # all trusted: the leftmost
    ("::ffff:127.0.0.1", "203.0.113.9", LOOPBACK, "203.0.113.9"),  # IPv4-mapped peer
    ("127.0.0.1", "[2001:db8::1]:443", LOOPBACK, "2001:db8::1"),
    ("127.0.0.1", "198.51.100.4:5678", LOOPBACK, "198.51.100.4"),
    ("192.0.2.50", "203.0.113.9", LOOPBACK, "192.0.2.50"),  # an untrusted peer's header is ignored
    ("127.0.0.1", "203.0.113.9", forwarded.Trusted([]), "127.0.0.1"),  # nothing trusted
    ("192.0.2.50", "203.0.113.9", forwarded.Trusted(["*"]), "203.0.113.9"),
    ("10.2.3.4", "203.0.113.9, 10.9.9.9", forwarded.Trusted(["10.0.0.0/8"]), "203.0.113.9"),
    ("127.0.0.1", None, LOOPBACK, "127.0.0.1"),
])
def test_client_address(peer: str, header: str | None, trusted: forwarded.Trusted, expected: str) -> None:
    assert forwarded.client_address(peer, header, trusted) == expected


def test_the_middleware_rewrites_remote_addr_and_keeps_the_peer() -> None:
    seen: dict[str, Any] = {}

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.update(environ)
        return []

    wrapped = forwarded.middleware(app, ["127.0.0.1"])
    wrapped({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "1.2.3.4, 203.0.113.9"}, None)
    assert seen["REMOTE_ADDR"] == "203.0.113.9" and seen[forwarded.PEER_KEY] == "127.0.0.1"
    assert forwarded.middleware(app, []) is app


def test_a_reload_cannot_change_the_server_section(tmp_path: Path) -> None:
    import yaml

    from proxy.serving.config_check import for_reload

    def text(**server: Any) -> str:
        return yaml.safe_dump({"client_keys": ["sk-c"], "upstreams": UPSTREAMS, "state_path": None, "server": server})

    path = str(tmp_path / "config.yaml")
    current = parse({"client_keys": ["sk-c"], "upstreams": UPSTREAMS, "state_path": None})
    assert for_reload(current, path, text()).server == current.server
    with pytest.raises(ConfigError) as caught:
        for_reload(current, path, text(forwarded_allow_ips=["10.0.0.0/8"]))
    assert str(caught.value).startswith("server.forwarded_allow_ips: cannot change on a reload")
    (tmp_path / "c.pem").write_text("x")
    with pytest.raises(ConfigError) as caught:
        for_reload(current, path, text(tls={"certfile": str(tmp_path / "c.pem"), "keyfile": str(tmp_path / "c.pem")}))
    assert str(caught.value).startswith("server.tls: cannot change on a reload")
