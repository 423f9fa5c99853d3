"""The status page's Keys and Audit panels in headless Chromium against a live gunicorn + gevent
proxy: an admin creates a runtime key, copies its secret from the once-shown box, uses it with the
openai SDK, revokes it on the page (after the confirmation) and the SDK is refused within a second;
the audit panel shows both changes; a viewer sees the keys but no control that changes them.

Needs the key API (`/admin/keys` POST/DELETE, `/admin/whoami`, `/admin/audit`, `admin_keys` with
roles). Browser set-up and skipping as in tests/e2e/test_status_page.py, whose fixtures it reuses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests import audit
from tests.conftest import DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.e2e.test_status_page import CHROMIUM, CHROMIUM_FLAGS, Browser, expect, playwright  # noqa: F401

ADMIN_KEY = "sk-admin-keys-page-test"
VIEWER_KEY = "sk-viewer-keys-page-test"
REVOKED_WITHIN_S = 1.0  # the promise: a revoked key is refused everywhere within a second


@pytest.fixture(scope="module")
def keys_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    config = base_config(demo_upstream.url, admin_keys=[
        {"name": "ops", "key": ADMIN_KEY, "role": "admin"},
        {"name": "auditor", "key": VIEWER_KEY, "role": "viewer"},
    ])
    server = start_proxy(config, tmp_path_factory.mktemp("status-page-keys"), workers=2)
    yield server
    stop_proxy(server)


@pytest.fixture
def browser(playwright: Any, keys_proxy: ProxyServer, tmp_path: Path) -> Iterator[Browser]:  # noqa: F811
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
        viewport={"width": 1400, "height": 1000}, service_workers="block")
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=keys_proxy.url)
    session = Browser(context.pages[0] if context.pages else context.new_page(), keys_proxy.url)
    errors: list[str] = []
    session.page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield session
    shot = tmp_path / "test-output" / "status-page-keys.png"
    shot.parent.mkdir(exist_ok=True)
    session.page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    context.close()
    assert errors == [], f"the page's script failed: {errors}"


def chat(proxy: ProxyServer, key: str) -> Any:
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0, timeout=20)
    return client.chat.completions.create(
        model="demo-model", messages=[{"role": "user", "content": "hi [demo:pace=0] [demo:words=3]"}])


def refused_within(proxy: ProxyServer, key: str, deadline_s: float) -> float:
    """Seconds until the SDK's call with `key` raises AuthenticationError, polling; fails past the deadline."""
    start = time.monotonic()
    while True:
        try:
            chat(proxy, key)
        except openai.AuthenticationError:
            return time.monotonic() - start
        assert time.monotonic() - start < deadline_s, f"the revoked key still worked after {deadline_s} s"


def test_an_admin_creates_copies_uses_and_revokes_a_key(browser: Browser, keys_proxy: ProxyServer) -> None:
    page = browser.page
    browser.open()
    browser.sign_in(ADMIN_KEY)
    expect(page.locator("#whoami")).to_have_text("ops (admin)")

    page.get_by_role("button", name="New key").click()
    page.locator("#key-name").fill("ci-run-1")
    page.locator("#key-models").fill("demo-*")
    page.locator("#key-metadata").fill('{"team": "ci"}')
    page.locator("#key-submit").click()
    reveal = page.locator("#key-reveal")
    expect(reveal).to_be_visible()
    expect(reveal).to_contain_text("it will not be shown again")
    secret = page.locator("#key-secret").inner_text()
    assert secret.startswith("sk-") and len(secret) >= 40
    audit.register([secret], None)  # from here on, no response or log line may carry it
    page.get_by_role("button", name="Copy").click()
    expect(page.locator("#copy-result")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == secret

    row = page.locator('#keys tr[data-key="ci-run-1"]')
    expect(row.locator(".hint")).to_have_text(f"sk-…{secret[-4:]}")
    expect(row.locator("td").nth(1)).to_have_text("runtime")
    expect(row.locator(".models")).to_have_text("demo-*")
    assert chat(keys_proxy, secret).choices[0].message.content  # usable at once, on either worker

    page.get_by_role("button", name="Done").click()
    expect(reveal).to_be_hidden()
    assert secret not in page.content()  # the reveal box was the only place it was, and it is empty now

    row.get_by_role("button", name="Revoke ci-run-1").click()
    dialog = page.locator("#revoke-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("h2")).to_have_text("Revoke ci-run-1?")
    dialog.get_by_role("button", name="Revoke", exact=True).click()
    took = refused_within(keys_proxy, secret, REVOKED_WITHIN_S)
    print(f"revoked key refused after {took:.3f} s")
    expect(row).to_have_count(0)

    entries = page.locator('#audit tr[data-target="key:ci-run-1"]')
    browser.refresh()
    expect(entries).to_have_count(2)
    expect(entries.nth(0)).to_have_attribute("data-action", "key.revoke")  # newest first
    expect(entries.nth(1)).to_have_attribute("data-action", "key.create")
    expect(entries.nth(1).locator("td").nth(1)).to_have_text("ops")
    assert secret not in page.content()


def test_a_viewer_sees_the_keys_but_no_control_that_changes_them(browser: Browser) -> None:
    page = browser.page
    browser.open()
    browser.sign_in(VIEWER_KEY)
    expect(page.locator("#whoami")).to_have_text("auditor (viewer)")
    expect(page.locator('#keys tr[data-origin="config"]').first).to_be_visible()
    expect(page.locator('[data-section="keys"] .section-error')).to_be_hidden()
    for name in ("New key", "Revoke", "Rotate", "Disable", "Enable", "Edit"):
        expect(page.locator("#keys-section").get_by_role("button", name=name)).to_have_count(0)
    expect(page.locator("#audit tbody tr").first).to_be_visible()
