"""`llm-proxy state export | import`: a host's state moved from SQLite to Redis and back, through
the command line, and read by a proxy started on the other backend — account states and reasons,
the runtime overlay, counters and usage — and what an import does to a store that already has
state (states replaced, counters and usage added)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.integration.test_pool import account, admin
from tests.integration.test_pool_shared_state import chat, config, graceful_stop
from tests.integration.test_several_hosts import usage_total

EPOCH = 60.0  # usage since the beginning: every minute stored


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.serving.cli", "state", *args], capture_output=True, text=True,
                          timeout=60)


def write_config(cfg: dict[str, Any], folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    cfg.setdefault("state_path", str(folder / "state.db"))
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def started(cfg: dict[str, Any], folder: Path) -> ProxyServer:
    folder.mkdir(exist_ok=True)
    server = start_proxy(cfg, folder)
    assert chat(server, uuid.uuid4().hex) == 200  # serving; this request counts too
    return server


def check(server: ProxyServer, requests: int) -> None:
    assert usage_total(server, EPOCH) == requests
    accounts = admin(server, "GET", "/admin/accounts")[1]["upstreams"][0]["accounts"]
    assert sum(a["requests"] for a in accounts) == requests
    disabled = account(server, "main", "acct-1")
    assert (disabled["status"], disabled["reason"]) == ("disabled", "admin: moving hosts")
    assert account(server, "main", "added")["key"] == "…dded"


def test_state_moves_from_sqlite_to_redis_and_back(demo_upstream: DemoUpstream, redis_url: str,
                                                   tmp_path: Path) -> None:
    keys = [f"sk-move-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    sqlite_cfg = config(demo_upstream, keys, probe={"interval": 3600})
    redis_cfg = {**config(demo_upstream, keys, probe={"interval": 3600}),
                 "state": {"backend": "redis", "url": redis_url, "prefix": "moved:"}}
    first = started(sqlite_cfg, tmp_path / "sqlite")
    try:
        for _ in range(4):
            assert chat(first, uuid.uuid4().hex) == 200
        admin(first, "POST", "/admin/accounts/main/acct-1/disable", {"reason": "moving hosts"})
        admin(first, "POST", "/admin/accounts/main", {"id": "added", "api_key": "sk-move-added"})
    finally:
        graceful_stop(first)  # the worker writes what it has on exit
    exported = tmp_path / "export.jsonl"
    done = cli("export", str(exported), "--config", str(tmp_path / "sqlite" / "config.yaml"))
    assert done.returncode == 0, done.stderr
    assert "5 requests" in done.stderr and exported.stat().st_mode & 0o077 == 0  # it holds keys: owner only
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    usage_lines = [line for line in lines if line["type"] == "usage"]
    assert usage_lines and all(line["endpoint"] == "chat_completions" and line["served_model"] == line["model"]
                               for line in usage_lines)
    # As an export from before the endpoint and served model were kept wrote it: they take their defaults.
    for line in usage_lines:
        del line["endpoint"], line["served_model"]
    exported.write_text("".join(json.dumps(line) + "\n" for line in lines))
    redis_config = write_config(redis_cfg, tmp_path / "redis")
    done = cli("import", str(exported), "--config", str(redis_config))
    assert done.returncode == 0, done.stderr

    second = started(redis_cfg, tmp_path / "redis")  # 6 requests with this one
    try:
        check(second, 6)
    finally:
        graceful_stop(second)
    back = tmp_path / "back.jsonl"
    assert cli("export", str(back), "--config", str(redis_config)).returncode == 0
    assert {(line["endpoint"], line["served_model"]) for line in map(json.loads, back.read_text().splitlines())
            if line["type"] == "usage" and line["client_protocol"] == "chat_completions"} == {
        ("chat_completions", line["model"]) for line in usage_lines}
    fresh_cfg = config(demo_upstream, keys, probe={"interval": 3600})
    fresh_config = write_config(fresh_cfg, tmp_path / "sqlite-again")
    done = cli("import", str(back), "--config", str(fresh_config))
    assert done.returncode == 0 and "6 requests" in done.stderr, done.stderr
    third = started(fresh_cfg, tmp_path / "sqlite-again")
    try:
        check(third, 7)
    finally:
        stop_proxy(third)
    # Into a store that has state: counters and usage add up, states are the file's.
    done = cli("import", str(back), "--config", str(fresh_config))
    assert done.returncode == 0, done.stderr
    again = cli("export", "-", "--config", str(fresh_config))
    assert "13 requests" in again.stderr


def minimal(url: str) -> dict[str, Any]:
    return {"client_keys": ["sk-client"], "state": {"backend": "redis", "url": url},
            "upstreams": [{"name": "main", "protocol": "chat_completions", "base_url": "http://127.0.0.1:9/v1",
                           "accounts": [{"id": "a", "api_key": "sk-unused"}]}]}


def test_an_import_says_what_is_wrong(redis_url: str, tmp_path: Path) -> None:
    cfg = write_config(minimal(redis_url), tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "account"}\n')
    done = cli("import", str(bad), "--config", str(cfg))
    assert done.returncode == 1 and "not an llm-proxy state export" in done.stderr
    bad.write_text('{"type": "llm-proxy-state", "format": 1}\n{"type": "account", "id": "x"}\n')
    done = cli("import", str(bad), "--config", str(cfg))
    assert done.returncode == 1 and "line 2: a account line is missing a field" in done.stderr
    unreachable = write_config(minimal("redis://127.0.0.1:1/0"), tmp_path / "down")
    done = cli("export", "-", "--config", str(unreachable))
    assert done.returncode == 1 and "cannot reach Redis at redis://127.0.0.1:1/0" in done.stderr
