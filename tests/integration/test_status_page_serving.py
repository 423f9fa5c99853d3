"""The status page as HTTP: served at /admin/ by a live proxy without a key (it holds no data), with
headers that forbid inline script, framing and referrers, its assets vendored, small and loading
nothing from elsewhere — while every data endpoint under /admin/ keeps its admin key check.
What the page does in a browser: tests/e2e/test_status_page.py."""

from __future__ import annotations

import configparser
import fnmatch
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CLIENT_KEY, ROOT, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.wire import RawResponse, request

ADMIN_KEY = "sk-admin-status-page"
ASSETS = ROOT / "proxy" / "blueprints" / "status_page_assets"


@pytest.fixture(scope="module")
def admin_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    server = start_proxy(base_config(demo_upstream.url, admin_keys=[ADMIN_KEY]), tmp_path_factory.mktemp("page"))
    yield server
    stop_proxy(server)


def get(proxy: ProxyServer, path: str, headers: dict[str, str] | None = None) -> tuple[RawResponse, bytes]:
    resp = request(proxy.url, "GET", path, headers=headers)
    body = resp.body()
    resp.close()
    return resp, body


def referenced_assets(html: str) -> list[str]:
    """What the page loads: its src/href attributes, and the modules its scripts import."""
    names = re.findall(r'(?:src|href)="static/([^"]+)"', html)
    for script in ASSETS.glob("*.js"):
        names += re.findall(r'from "\./([^"]+)"', script.read_text())
    return sorted(set(names))


def test_the_page_is_served_without_a_key_under_a_strict_policy(admin_proxy: ProxyServer) -> None:
    resp, body = get(admin_proxy, "/admin/")
    assert resp.status == 200 and resp.headers["content-type"] == "text/html; charset=utf-8"
    policy = dict(part.strip().split(" ", 1) for part in resp.headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'" and policy["form-action"] == "'none'"
    assert "unsafe" not in resp.headers["content-security-policy"]
    assert resp.headers["x-frame-options"] == "DENY" and resp.headers["referrer-policy"] == "no-referrer"
    assert resp.headers["x-content-type-options"] == "nosniff" and resp.headers["cache-control"] == "no-store"
    html = body.decode()
    assert "<title>llm-proxy status</title>" in html
    # No field has a name, so no form submission could ever carry one (the key, or a new key's
    # settings) into a URL or anywhere; the admin key's field is the one password field.
    inputs = re.findall(r"<(?:input|textarea|select)[^>]*>", html)
    assert inputs and not [i for i in inputs if " name=" in i]
    (key_input,) = [i for i in inputs if 'type="password"' in i]
    assert 'id="admin-key"' in key_input

    redirect, _ = get(admin_proxy, "/admin")
    assert redirect.status == 308 and redirect.headers["location"] == "admin/"


def test_every_asset_is_vendored_small_and_revalidated(admin_proxy: ProxyServer) -> None:
    _, body = get(admin_proxy, "/admin/")
    names = referenced_assets(body.decode())
    assert {"main.js", "status.css", "favicon.svg", "api.js", "charts.js"} <= set(names)
    assert set(names) | {"index.html"} == {p.name for p in ASSETS.iterdir()}  # nothing shipped unused
    types = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
    for name in names:
        resp, data = get(admin_proxy, f"/admin/static/{name}")
        assert resp.status == 200 and data == (ASSETS / name).read_bytes(), name
        assert resp.headers["content-type"] == types[Path(name).suffix]
        assert resp.headers["x-content-type-options"] == "nosniff" and resp.headers["cache-control"] == "no-cache"
        again, empty = get(admin_proxy, f"/admin/static/{name}", {"If-None-Match": resp.headers["etag"]})
        assert again.status == 304 and empty == b""
    total = sum(p.stat().st_size for p in ASSETS.iterdir())
    assert total < 64 * 1024, f"the status page's assets grew to {total} bytes"


def test_the_page_loads_nothing_from_elsewhere_and_runs_no_inline_code() -> None:
    for path in ASSETS.iterdir():
        text = path.read_text()
        # The SVG namespace is a name, not something fetched.
        urls = [u for u in re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", text)
                if u != "http://www.w3.org/2000/svg"]
        assert urls == [], f"{path.name} refers to {urls}"
    html = (ASSETS / "index.html").read_text()
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []  # no inline script
    assert re.findall(r"\son[a-z]+=|\sstyle=", html) == []  # no inline handlers or styles (the policy would block them)
    assert "innerHTML" not in "".join(p.read_text() for p in ASSETS.glob("*.js"))  # API data goes in as text


def test_the_data_endpoints_keep_their_key_check(admin_proxy: ProxyServer) -> None:
    for path in ("/admin/accounts", "/admin/static/../accounts", "/admin/static/%2e%2e/accounts",
                 "/admin/usage", "/admin/requests", "/admin/status"):
        for headers in ({}, {"Authorization": f"Bearer {CLIENT_KEY}"}):
            resp, body = get(admin_proxy, path, headers)
            assert resp.status in (401, 404), (path, resp.status)
            assert b"upstreams" not in body and resp.headers["content-type"] == "application/json", path
    missing, body = get(admin_proxy, "/admin/static/nothing.js")
    assert missing.status == 404 and b"has no file 'nothing.js'" in body
    resp, body = get(admin_proxy, "/admin/accounts", {"Authorization": f"Bearer {ADMIN_KEY}"})
    assert resp.status == 200 and b"upstreams" in body


def test_without_admin_keys_the_page_is_off_too(proxy: ProxyServer) -> None:
    resp, body = get(proxy, "/admin/")
    assert resp.status == 403 and b"The admin API is disabled" in body


def test_the_assets_are_package_data() -> None:
    """`pip install .` (not only an editable install) ships every file the page needs."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    patterns = setup["options.package_data"]["proxy.blueprints"].split()
    for path in ASSETS.iterdir():
        assert any(fnmatch.fnmatch(f"status_page_assets/{path.name}", p) for p in patterns), path.name
