"""Serving that cannot be misconfigured by accident: the gunicorn settings ship in the package and
work from any directory; a worker class other than the proxy's gevent worker, or no worker at all,
is refused with one line; each instance's control socket sits beside its state file; `/readyz`
says whether every upstream can serve; the startup summary says what is served."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from gunicorn.ctl.client import ControlClient
from openai import OpenAI

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, listening_socket, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY, admin
from tests.wire import request

PACKAGED = "python:proxy.serving.gunicorn_conf"
LLM_PROXY = [sys.executable, "-m", "proxy.serving.cli"]


def env_for(config: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "LLM_PROXY_CONFIG": str(config), **extra}


def write_config(tmp_path: Path, demo: DemoUpstream, **overrides: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**base_config(demo.url), "state_path": str(tmp_path / "state.db"), **overrides}))
    return path


def answers(url: str) -> str:
    client = OpenAI(base_url=f"{url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=30)
    completion = client.chat.completions.create(model="demo-model", messages=[
        {"role": "user", "content": "hi [demo:words=3] [demo:pace=0]"}])
    return str(completion.choices[0].message.content)


def test_the_packaged_gunicorn_config_works_from_any_directory(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    config = write_config(tmp_path, demo_upstream)
    sock = listening_socket()
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    with open(tmp_path / "out.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-c", PACKAGED, "--bind", f"fd://{sock.fileno()}",
                                 "proxy.wsgi:app"], pass_fds=[sock.fileno()], cwd=cwd, env=env_for(config),
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    try:
        assert answers(url).split() == ["Hello", "from", "the"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
    log = (tmp_path / "out.log").read_text()
    assert "Using worker: proxy.serving.worker.ProxyGeventWorker" in log and "Traceback" not in log
    assert f"serving {url} (master pid {proc.pid})" in log


def refusal(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The proxy's own lines in a refused start; there must be no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("llm-proxy:")]


def test_a_sync_worker_is_refused_with_one_line(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    config = write_config(tmp_path, demo_upstream)
    result = subprocess.run([sys.executable, "-m", "gunicorn", "-c", PACKAGED, "-k", "sync", "--bind", "127.0.0.1:0",
                             "proxy.wsgi:app"], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                            env=env_for(config))
    assert result.returncode == 2
    (line,) = refusal(result)
    assert line.startswith("llm-proxy: worker class 'sync' cannot serve the proxy: it needs its gevent worker")


def test_without_the_packaged_config_the_app_refuses_to_start(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    """`gunicorn proxy.wsgi:app` alone: gunicorn's default sync worker, which the app itself refuses."""
    config = write_config(tmp_path, demo_upstream)
    result = subprocess.run([sys.executable, "-m", "gunicorn", "--bind", "127.0.0.1:0", "proxy.wsgi:app"],
                            capture_output=True, text=True, timeout=30, cwd=tmp_path, env=env_for(config))
    assert result.returncode != 0
    (line,) = refusal(result)
    assert line.startswith("llm-proxy: refusing to start: this is not the proxy's gevent worker")
    assert "python:proxy.serving.gunicorn_conf" in line


def test_zero_workers_are_refused(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    config = write_config(tmp_path, demo_upstream)
    served = subprocess.run([*LLM_PROXY, "serve", "--config", str(config), "--workers", "0", "--bind", "127.0.0.1:0"],
                            capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert served.returncode == 2 and "Traceback" not in served.stderr
    assert "--workers: must be at least 1 (got 0)" in served.stderr
    by_env = subprocess.run([sys.executable, "-m", "gunicorn", "-c", PACKAGED, "--bind", "127.0.0.1:0",
                             "proxy.wsgi:app"], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                            env=env_for(config, LLM_PROXY_WORKERS="0"))
    assert by_env.returncode == 2
    assert refusal(by_env) == ["llm-proxy: workers: must be at least 1 (got 0; set by --workers or LLM_PROXY_WORKERS)"]


def control_socket(server: ProxyServer, state_dir: Path) -> Path:
    """The instance's control socket, once its master has opened it (after the workers started)."""
    path = state_dir / "state.db.ctl"
    deadline = time.monotonic() + 15
    while "Control socket listening" not in server.log() and time.monotonic() < deadline:
        pass
    assert f"Control socket listening at {path}" in server.log()
    return path


def test_each_instance_has_its_control_socket_beside_its_state(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    first = start_proxy(base_config(demo_upstream.url), one)
    second = start_proxy(base_config(demo_upstream.url), two)
    try:
        assert answers(first.url) and answers(second.url)
        for server, state_dir in ((first, one), (second, two)):
            with ControlClient(str(control_socket(server, state_dir)), timeout=10) as ctl:
                assert ctl.send_command("show stats")["pid"] == server.process.pid  # its own master
    finally:
        stop_proxy(first)
        stop_proxy(second)
    assert not (one / "state.db.ctl").exists()  # removed when the instance stops


def readyz(server: ProxyServer) -> tuple[int, Any]:
    resp = request(server.url, "GET", "/readyz")  # no key
    out = resp.status, resp.json()
    resp.close()
    return out


def test_readyz_says_whether_every_upstream_has_an_active_account(demo_upstream: DemoUpstream,
                                                                  tmp_path: Path) -> None:
    config = base_config(demo_upstream.url, admin_keys=[ADMIN_KEY])
    config["upstreams"].append({"name": "spare", "protocol": "chat_completions", "base_url": demo_upstream.url,
                                "models": {"serve": ["spare-*"]}, "accounts": [{"id": "s1", "api_key": "sk-ready-s1"}]})
    server = start_proxy(config, tmp_path)
    try:
        assert readyz(server) == (200, {"ready": True, "state": "ok", "state_backend": "sqlite", "upstreams": {
            "main": {"active": 2, "cooling": 0, "disabled": 0}, "spare": {"active": 1, "cooling": 0, "disabled": 0}}})
        admin(server, "POST", "/admin/accounts/main/acct-1/disable", {"reason": "test"})
        status, body = readyz(server)
        assert status == 200 and body["upstreams"]["main"] == {"active": 1, "cooling": 0, "disabled": 1}
        admin(server, "POST", "/admin/accounts/spare/s1/disable", {"reason": "test"})
        assert readyz(server) == (503, {"ready": False, "state": "ok", "state_backend": "sqlite", "upstreams": {
            "main": {"active": 1, "cooling": 0, "disabled": 1}, "spare": {"active": 0, "cooling": 0, "disabled": 1}}})
        admin(server, "POST", "/admin/accounts/spare/s1/enable")
        assert readyz(server)[0] == 200
        health = request(server.url, "GET", "/healthz")
        assert health.status == 200 and health.json()["status"] == "ok"
        health.close()
    finally:
        stop_proxy(server)


def test_serve_prints_a_startup_summary(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    config = write_config(tmp_path, demo_upstream, admin_keys=[ADMIN_KEY])
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    proc = subprocess.Popen([*LLM_PROXY, "serve", "--config", str(config), "--bind", f"fd://{sock.fileno()}",
                             "--workers", "2"], pass_fds=[sock.fileno()], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    sock.close()
    try:
        assert answers(url)  # up: the summary was printed before the workers started
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=15)
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("llm-proxy ")))
    summary = dict(line.strip().split(":", 1) for line in lines[start + 1:start + 11])
    assert lines[start].endswith(f"serving {url} (master pid {proc.pid})")
    assert summary["workers"].strip() == "2 gevent workers"
    assert summary["config"].strip() == str(config)
    assert summary["upstreams"].strip() == "main (chat_completions, 2 accounts)"
    assert summary["state"].strip() == str(tmp_path / "state.db")
    assert summary["control"].strip() == str(tmp_path / "state.db.ctl")
    assert summary["admin API"].strip() == f"on (1 admin key); status page {url}/admin/"
    assert summary["metrics"].strip() == f"on at {url}/metrics, with an admin key"
    assert summary["reload"].strip() == f"kill -HUP {proc.pid}, or POST /admin/reload"
    assert ADMIN_KEY not in out and CLIENT_KEY not in out  # counted, never shown
