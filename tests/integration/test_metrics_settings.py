"""What the `metrics:` settings change at the edge, with the app in-process: who may read
GET /metrics, and that `metrics.enabled: false` turns it off while /admin/status still answers; and `usage.enabled: false`."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient

from proxy.config import parse
from proxy.serving.app import create_app
from tests.conftest import CLIENT_KEY, base_config
from tests.state_files import migrated

ADMIN = "sk-admin-settings"


def app(tmp: Path, **overrides: Any) -> FlaskClient:
    config = base_config("http://127.0.0.1:1/v1", state_path=migrated(tmp / "state.db"), **overrides)
    return create_app(parse(config), start_background=False).test_client()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_without_admin_keys_metrics_say_how_to_open_them(tmp_path: Path) -> None:
    resp = app(tmp_path).get("/metrics", headers=bearer(CLIENT_KEY))
    assert resp.status_code == 403
    assert resp.get_json()["error"]["message"] == (
        "/metrics needs an admin key and none is configured: list keys under admin_keys in the config, "
        "or set metrics.public: true to serve it without a key.")


def test_a_missing_key_on_metrics_says_an_admin_key_is_needed(tmp_path: Path) -> None:
    resp = app(tmp_path, admin_keys=[ADMIN]).get("/metrics")
    assert resp.status_code == 401
    assert "this endpoint needs an admin key" in resp.get_json()["error"]["message"]


def test_metrics_turned_off_answer_404_and_the_status_still_counts_streams(tmp_path: Path) -> None:
    client = app(tmp_path, admin_keys=[ADMIN], metrics={"enabled": False})
    resp = client.get("/metrics", headers=bearer(ADMIN))
    assert resp.status_code == 404
    assert resp.get_json()["error"]["message"] == (
        "Metrics are turned off in this proxy's config (metrics.enabled: false).")
    status = client.get("/admin/status", headers=bearer(ADMIN)).get_json()
    assert (status["open_streams"], status["workers"], status["config"]) == (0, 1, None)


def test_usage_turned_off_answers_404_and_writes_nothing(tmp_path: Path) -> None:
    client = app(tmp_path, admin_keys=[ADMIN], usage={"enabled": False})
    for path in ("/admin/usage", "/admin/requests"):
        resp = client.get(path, headers=bearer(ADMIN))
        assert resp.status_code == 404
        assert resp.get_json()["error"]["message"] == (
            f"{path} is off: usage accounting is disabled in the proxy's config (usage.enabled: false).")
    assert client.post("/v1/chat/completions", headers=bearer(CLIENT_KEY), json={}).status_code == 400
    with sqlite3.connect(tmp_path / "state.db") as db:  # the 400 above would be a usage row if accounting were on
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = [db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                for table in ("usage_minutes", "recent_requests") if table in tables]
    assert not any(rows)
