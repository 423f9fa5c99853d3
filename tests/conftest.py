"""Shared fixtures: live servers on loopback, started the way users start them.

The simulated upstream (`python -m proxy.demo`) and the proxy (`gunicorn -c gunicorn.conf.py
proxy.wsgi:app`, gevent worker) run as real processes. Each is handed a socket that is already
listening (`--fd N` / `--bind fd://N`), so a test's first request simply waits in the kernel's
accept queue until the server is up: no readiness polling, no sleeps.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import audit

pytest_plugins = ["tests.redis_server"]  # redis_url, fresh_redis: a real redis-server on loopback

ROOT = Path(__file__).resolve().parent.parent
CLIENT_KEY = "sk-client-test"
UPSTREAM_KEYS = ("sk-up-1", "sk-up-2")
ALL_UPSTREAM_KEYS = (*UPSTREAM_KEYS, "sk-up-ds")


def listening_socket() -> socket.socket:
    sock = socket.create_server(("127.0.0.1", 0))
    sock.set_inheritable(True)
    return sock


@dataclass
class DemoUpstream:
    url: str  # base URL with /v1
    root: str
    process: subprocess.Popen[bytes]

    def requests(self, request_id: str) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.root}/_demo/requests?request_id={request_id}", timeout=10) as r:
            return json.loads(r.read())

    def control(self, path: str, method: str = "POST", body: Any = None, timeout: float = 10) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.root}{path}", data=data, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())


def start_demo_upstream() -> DemoUpstream:
    sock = listening_socket()
    port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "proxy.demo", "--fd", str(sock.fileno()),
                             "--parent-pid", str(os.getpid())], pass_fds=[sock.fileno()], cwd=ROOT)
    sock.close()
    root = f"http://127.0.0.1:{port}"
    return DemoUpstream(url=f"{root}/v1", root=root, process=proc)


@pytest.fixture(scope="session")
def demo_upstream() -> Iterator[DemoUpstream]:
    upstream = start_demo_upstream()
    yield upstream
    upstream.process.terminate()
    upstream.process.wait(timeout=10)


def base_config(upstream_url: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "client_keys": [CLIENT_KEY],
        "upstreams": [{
            "name": "main",
            "protocol": "chat_completions",
            "base_url": upstream_url,
            "accounts": [{"id": f"acct-{i + 1}", "api_key": key} for i, key in enumerate(UPSTREAM_KEYS)],
        }],
    }
    config.update(overrides)
    return config


@dataclass
class ProxyServer:
    url: str  # root URL, no /v1
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


_proxy_numbers = itertools.count()


def start_proxy(config: dict[str, Any], tmp: Path, extra_env: dict[str, str] | None = None,
                workers: int = 1) -> ProxyServer:
    config.setdefault("state_path", str(tmp / "state.db"))
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    sock = listening_socket()
    port = sock.getsockname()[1]
    log_path = tmp / f"proxy-{next(_proxy_numbers)}.log"  # a restart in the same folder keeps the old log
    audit.register((a.get("api_key", "") for u in config.get("upstreams", []) for a in u.get("accounts", [])),
                   log_path)
    audit.register(k["key"] for k in config.get("client_keys", []) if isinstance(k, dict))  # named keys' secrets
    env = {**os.environ, "LLM_PROXY_CONFIG": str(path), "LLM_PROXY_WORKERS": str(workers), **(extra_env or {})}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "gunicorn.conf.py"), "--bind",
             f"fd://{sock.fileno()}", "proxy.wsgi:app"],
            pass_fds=[sock.fileno()], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    sock.close()
    return ProxyServer(url=f"http://127.0.0.1:{port}", process=proc, log_path=log_path)


@pytest.fixture(scope="session", autouse=True)
def secret_audit() -> Iterator[None]:
    """Fails the session if any configured upstream key reached a test client or a proxy log."""
    untap = audit.tap_httpx()
    yield
    untap()
    audit.scan_logs()
    assert not audit.leaks, "upstream keys escaped:\n" + "\n".join(sorted(set(audit.leaks)))


def stop_proxy(server: ProxyServer) -> None:
    """Quick shutdown (SIGINT); graceful SIGTERM behaviour has its own tests."""
    server.process.send_signal(signal.SIGINT)
    try:
        server.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="session")
def proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    """The proxy with default settings in front of the demo upstream; models named `deepseek-*` go to
    a second upstream (the same demo server) configured like a DeepSeek-style backend."""
    config = base_config(demo_upstream.url)
    config["upstreams"][0]["models"] = {"aliases": {"alias-model": "demo-model"}}
    config["upstreams"].insert(0, {
        "name": "deepseek", "protocol": "chat_completions", "base_url": demo_upstream.url,
        "accounts": [{"id": "ds-1", "api_key": "sk-up-ds"}],
        "models": {"serve": ["deepseek-*"], "list_upstream": False},
        "reasoning": {"passback": True, "control": "deepseek"},
        "max_output_tokens": 8192,
    })
    server = start_proxy(config, tmp_path_factory.mktemp("proxy"))
    yield server
    stop_proxy(server)


@pytest.fixture(scope="session")
def fast_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    """The proxy with short keepalive and idle deadlines, for timing behaviour."""
    config = base_config(demo_upstream.url, streaming={"keepalive_interval": 0.2, "idle_timeout": 1.5},
                         max_body_bytes=4096)
    server = start_proxy(config, tmp_path_factory.mktemp("fast-proxy"))
    yield server
    stop_proxy(server)
