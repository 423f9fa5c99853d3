"""The Keys and Audit panels' own behaviour in headless Chromium, against a stand-in for the key API:
a small Flask app that serves the real page (proxy.blueprints.status_page) and answers /admin/ with
the shapes the key API answers (docs/keys.md), keeping keys in a dict. It checks what the page does
with those answers — forms, the once-shown secret, the API's error messages, a viewer's read-only
view — without the proxy; tests/e2e/test_status_page_keys.py checks the same flows end to end.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask, Response, jsonify, request
from werkzeug.serving import make_server

from proxy.blueprints import status_page
from tests.e2e.test_status_page import CHROMIUM, CHROMIUM_FLAGS, expect, playwright  # noqa: F401

ROLES = {"sk-stub-admin": ("ops", "admin"), "sk-stub-viewer": ("auditor", "viewer")}
CONFIG_KEY: dict[str, Any] = {"name": "team-a", "origin": "config", "hint": None, "created_at": None, "last_used_at": None,
              "expires_at": None, "disabled": False, "models": None, "limits": None, "budget": None,
              "groups": [], "metadata": {}, "rotating_until": None}


def error(status: int, message: str, param: str | None = None) -> tuple[Response, int]:
    return jsonify({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}), status


def stub_api() -> Flask:
    app = Flask(__name__)
    app.register_blueprint(status_page.bp)
    keys: dict[str, dict[str, Any]] = {"team-a": dict(CONFIG_KEY)}
    audit: list[dict[str, Any]] = []

    def caller() -> tuple[str, str] | None:
        return ROLES.get(request.headers.get("Authorization", "").removeprefix("Bearer "))

    def record(action: str, name: str, before: Any, after: Any) -> None:
        who = caller()
        audit.append({"at": time.time(), "actor": who[0] if who else "?", "action": action, "target": f"key:{name}",
                      "before": copy.deepcopy(before), "after": copy.deepcopy(after), "request_id": "req-1",
                      "client": "127.0.0.1"})

    @app.before_request
    def check() -> Any:
        if status_page.is_page(request.path):
            return None
        who = caller()
        if who is None:
            return error(401, "Invalid API key")
        if request.method != "GET" and who[1] != "admin":
            return error(403, "A viewer key cannot change anything.")
        return None

    @app.get("/admin/<view>")
    def read(view: str) -> Any:
        who = caller()
        answers: dict[str, Any] = {
            "whoami": {"name": who[0], "role": who[1]} if who else {}, "status": {"open_streams": 0},
            "accounts": {"upstreams": []}, "requests": {"data": []}, "usage": {"data": []},
            "audit": {"data": audit[::-1]}, "keys": {"data": list(keys.values()), "groups": []}}
        return jsonify(answers[view])

    @app.post("/admin/keys")
    def create() -> Any:
        body = request.get_json()
        if " " in body["name"]:
            return error(400, "name: letters, digits, '.', '_' and '-' only", "name")
        key = {**CONFIG_KEY, **body, "origin": "runtime", "hint": "sk-…ab12", "created_at": "2026-11-28T18:00:00Z"}
        keys[key["name"]] = key
        record("key.create", key["name"], None, key)
        return jsonify({"key": key, "secret": "sk-" + "s" * 39 + "ab12"}), 201

    @app.patch("/admin/keys/<name>")
    def patch(name: str) -> Any:
        before = copy.deepcopy(keys[name])
        keys[name].update(request.get_json())
        record("key.update", name, before, keys[name])
        return jsonify(keys[name])

    @app.post("/admin/keys/<name>/rotate")
    def rotate(name: str) -> Any:
        if request.get_json()["grace_seconds"] == 7:
            return error(400, "grace_seconds: the stub refuses 7", "grace_seconds")
        before = copy.deepcopy(keys[name])
        keys[name].update(hint="sk-…cd34", rotating_until="2030-01-01T00:00:00Z")
        record("key.rotate", name, before, keys[name])
        return jsonify({"key": keys[name], "secret": "sk-" + "r" * 39 + "cd34"})

    @app.delete("/admin/keys/<name>")
    def revoke(name: str) -> Any:
        record("key.revoke", name, keys.pop(name), None)
        return jsonify({"name": name, "revoked": True})

    return app


@pytest.fixture
def page(playwright: Any) -> Iterator[Any]:  # noqa: F811
    server = make_server("127.0.0.1", 0, stub_api(), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_port}"
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=origin)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.goto(f"{origin}/admin/")
    yield tab
    browser.close()
    server.shutdown()
    assert errors == [], f"the page's script failed: {errors}"


def sign_in(page: Any, key: str) -> None:
    page.locator("#admin-key").fill(key)
    page.locator("#sign-in-form button").click()


def test_an_admin_creates_edits_rotates_disables_and_revokes(page: Any) -> None:
    sign_in(page, "sk-stub-admin")
    expect(page.locator("#whoami")).to_have_text("ops (admin)")
    page.get_by_role("button", name="New key").click()
    page.locator("#key-name").fill("bad name")
    page.locator("#key-submit").click()
    expect(page.locator("#key-dialog .error")).to_have_text("name: letters, digits, '.', '_' and '-' only")
    page.locator("#key-name").fill("ci-1")
    page.locator("#key-limits").fill("{oops")
    page.locator("#key-submit").click()
    expect(page.locator("#key-dialog .error")).to_contain_text("Limits is not valid JSON")
    page.locator("#key-limits").fill('{"requests_per_minute": 5}')
    page.locator("#key-models").fill("demo-*, gpt-*")
    page.locator("#key-submit").click()

    expect(page.locator("#key-reveal")).to_contain_text("New key ci-1. Copy it now: it will not be shown again")
    secret = page.locator("#key-secret").inner_text()
    assert secret == "sk-" + "s" * 39 + "ab12"
    page.get_by_role("button", name="Copy").click()
    expect(page.locator("#copy-result")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    page.get_by_role("button", name="Done").click()
    expect(page.locator("#key-reveal")).to_be_hidden()
    assert secret not in page.content()

    row = page.locator('#keys tr[data-key="ci-1"]')
    expect(row.locator(".models")).to_have_text("demo-*, gpt-*")
    expect(row.locator(".hint")).to_have_text("sk-…ab12")
    row.get_by_role("button", name="Edit ci-1").click()
    page.locator("#key-models").fill("demo-*")
    page.locator("#key-submit").click()
    expect(row.locator(".models")).to_have_text("demo-*")
    row.get_by_role("button", name="Disable ci-1").click()
    expect(row).to_have_attribute("data-state", "disabled")
    row.get_by_role("button", name="Enable ci-1").click()
    expect(row).to_have_attribute("data-state", "active")

    row.get_by_role("button", name="Rotate ci-1").click()
    rotate = page.locator("#rotate-dialog")
    page.locator("#rotate-grace").fill("7")
    rotate.get_by_role("button", name="Rotate", exact=True).click()
    expect(rotate.locator(".error")).to_have_text("grace_seconds: the stub refuses 7")
    page.locator("#rotate-grace").fill("60")
    rotate.get_by_role("button", name="Rotate", exact=True).click()
    expect(page.locator("#key-secret")).to_have_text("sk-" + "r" * 39 + "cd34")
    expect(row.locator(".state")).to_contain_text("old secret until")
    page.get_by_role("button", name="Done").click()

    row.get_by_role("button", name="Revoke ci-1").click()
    expect(page.locator("#revoke-dialog h2")).to_have_text("Revoke ci-1?")
    page.locator("#revoke-dialog").get_by_role("button", name="Revoke", exact=True).click()
    expect(row).to_have_count(0)

    page.locator("#refresh").click()
    entries = page.locator('#audit tr[data-target="key:ci-1"]')
    expect(entries).to_have_count(6)
    actions = [entries.nth(i).get_attribute("data-action") for i in range(6)]
    assert actions == ["key.revoke", "key.rotate", "key.update", "key.update", "key.update", "key.create"]
    expect(entries.nth(4).locator(".change")).to_have_text('models: ["demo-*","gpt-*"] → ["demo-*"]')
    expect(entries.nth(3).locator(".change")).to_have_text("disabled: false → true")
    assert "ssssssss" not in page.content() and "rrrrrrrr" not in page.content()


def test_a_viewer_gets_no_control_and_sign_out_forgets_the_panels(page: Any) -> None:
    sign_in(page, "sk-stub-viewer")
    expect(page.locator("#whoami")).to_have_text("auditor (viewer)")
    expect(page.locator('#keys tr[data-key="team-a"]')).to_be_visible()
    for name in ("New key", "Revoke", "Rotate", "Disable", "Enable", "Edit"):
        expect(page.locator("#keys-section").get_by_role("button", name=name)).to_have_count(0)
    page.locator("#sign-out").click()
    expect(page.locator("#sign-in")).to_be_visible()
    assert page.locator("#keys tr").count() == 0 and page.locator("#whoami").inner_text() == ""
