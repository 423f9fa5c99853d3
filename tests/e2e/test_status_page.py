"""The status page in a real headless Chromium (Debian's `chromium`, driven by Playwright's Python
API) against a live gunicorn + gevent proxy in front of the demo upstream: signing in, the accounts
of the live server, disabling one and seeing the pool refuse it, a request appearing in the usage
chart and the last-requests table, the open-streams count, failures shown with the API's message —
with nothing fetched beyond loopback and the admin key in no URL and no cookie.

Skipped, saying why, when Chromium or Playwright is missing on a developer's machine; `.ci/run`
installs both and sets LLM_PROXY_BROWSER_TESTS=required, under which a missing browser fails the
run instead. Each test writes a screenshot of the page to its `test-output/` folder under pytest's
tmp_path and names it in its output.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest

from proxy.blueprints.auth import key_name
from tests.conftest import CLIENT_KEY, UPSTREAM_KEYS, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.wire import request

ADMIN_KEY = "sk-admin-browser-test"
REQUIRED = os.environ.get("LLM_PROXY_BROWSER_TESTS") == "required"
CHROMIUM = os.environ.get("LLM_PROXY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Flags that let Chromium run headless as root in a container, and keep it from calling home.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# USD per million tokens = micro-dollars per token: every model the demo serves here is priced.
PRICING = {"models": {"*": {"input": 1, "cached_input": 0.1, "output": 4}}}
WAIT_MS = 15000  # the longest any expectation waits; each returns as soon as it holds

if not Path(CHROMIUM).exists():
    if REQUIRED:
        raise RuntimeError(f"LLM_PROXY_BROWSER_TESTS=required but there is no Chromium at {CHROMIUM}")
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set LLM_PROXY_CHROMIUM); "
                ".ci/run installs it", allow_module_level=True)
if REQUIRED:
    import playwright.sync_api  # CI: fail, never skip, without the driver
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' brings Playwright")
expect = sync_api.expect
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def page_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    config = base_config(demo_upstream.url, admin_keys=[ADMIN_KEY], pricing=PRICING)
    server = start_proxy(config, tmp_path_factory.mktemp("status-page"))
    yield server
    stop_proxy(server)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        yield p


@dataclass
class Browser:
    page: Any
    origin: str
    seen: list[Any] = field(default_factory=list)  # every request the browser made
    blocked: list[str] = field(default_factory=list)  # ... of which these left loopback (and were refused)

    def open(self) -> None:
        self.page.goto(f"{self.origin}/admin/")

    def sign_in(self, key: str = ADMIN_KEY) -> None:
        self.page.locator("#admin-key").fill(key)
        self.page.locator("#sign-in-form button").click()

    def refresh(self) -> None:
        self.page.locator("#refresh").click()

    def account_row(self, upstream: str, account: str) -> Any:
        return self.page.locator(f'tr[data-account="{upstream}/{account}"]')


@pytest.fixture
def browser(playwright: Any, page_proxy: ProxyServer, tmp_path: Path) -> Iterator[Browser]:
    """A fresh Chromium profile on a network where only the proxy exists: anything else is refused
    (and recorded), so the page has to work offline."""
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
        viewport={"width": 1400, "height": 1000}, service_workers="block")
    origin = page_proxy.url
    session = Browser(context.pages[0] if context.pages else context.new_page(), origin)

    def only_loopback(route: Any) -> None:
        url = route.request.url
        if url.startswith(origin + "/"):
            route.continue_()
        else:
            session.blocked.append(url)
            route.abort()

    context.route("**/*", only_loopback)
    context.on("request", lambda req: session.seen.append(req))
    errors: list[str] = []
    session.page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield session
    output = tmp_path / "test-output"
    output.mkdir(exist_ok=True)
    shot = output / "status-page.png"
    session.page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    context.close()
    assert errors == [], f"the page's script failed: {errors}"
    assert session.blocked == [], f"the page tried to leave loopback: {session.blocked}"
    assert all(urlsplit(r.url).hostname == "127.0.0.1" for r in session.seen)
    assert not [r.url for r in session.seen if ADMIN_KEY in r.url], "the admin key went into a URL"


def chat(proxy: ProxyServer, model: str = "demo-model", text: str = "hi [demo:pace=0] [demo:words=3]") -> tuple[str, Any]:
    """One request through the proxy, as the OpenAI SDK sends it; returns its request id and answer."""
    request_id = f"page-{uuid.uuid4().hex}"
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
    answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}],
                                            extra_headers={"X-Request-Id": request_id})
    return request_id, answer


def test_signing_in_takes_an_admin_key_and_keeps_it_only_in_the_tab(browser: Browser) -> None:
    page = browser.page
    browser.open()
    expect(page.locator("#sign-in")).to_be_visible()
    expect(page.locator("#dashboard")).to_be_hidden()

    browser.sign_in("sk-not-a-key")
    expect(page.locator("#sign-in-error")).to_have_text(
        "Invalid API key: this endpoint needs an admin key (admin_keys) from the proxy's config.")
    browser.sign_in(CLIENT_KEY)  # a client key is not an admin key
    expect(page.locator("#sign-in-error")).to_contain_text("Invalid API key")
    expect(page.locator("#dashboard")).to_be_hidden()
    assert page.evaluate("sessionStorage.length") == 0  # a refused key is not kept

    browser.sign_in()
    expect(page.locator("#dashboard")).to_be_visible()
    for account in ("acct-1", "acct-2"):
        expect(browser.account_row("main", account).locator(".badge")).to_have_text("active")
    assert page.evaluate("sessionStorage.getItem('llm-proxy-admin-key')") == ADMIN_KEY
    assert page.evaluate("document.cookie") == "" and page.context.cookies() == []
    assert page.evaluate("localStorage.length") == 0
    api_calls = [r for r in browser.seen if "/admin/accounts" in r.url]
    assert api_calls and all(r.headers.get("authorization") == f"Bearer {ADMIN_KEY}" for r in api_calls[-1:])
    assert not any(key in page.content() for key in UPSTREAM_KEYS)  # masked: …the last four characters

    page.reload()  # the same tab keeps its session
    expect(browser.account_row("main", "acct-1")).to_be_visible()
    page.locator("#sign-out").click()
    expect(page.locator("#sign-in")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0
    assert page.locator("#accounts tr").count() == 0  # nothing of the signed-in view is left on screen
    page.reload()
    expect(page.locator("#sign-in")).to_be_visible()


def test_disabling_an_account_on_the_page_takes_it_out_of_the_pool(
        browser: Browser, page_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    page = browser.page
    browser.open()
    browser.sign_in()
    first, second = browser.account_row("main", "acct-1"), browser.account_row("main", "acct-2")
    expect(first.locator(".badge")).to_have_text("active")

    first.get_by_role("button", name="Disable acct-1").click()
    expect(first).to_have_attribute("data-state", "disabled")
    expect(first.locator(".reason")).to_have_text("admin: disabled on the status page")
    expect(first.get_by_role("button", name="Enable acct-1")).to_be_visible()
    for _ in range(3):  # every request now goes to the other account
        request_id, answer = chat(page_proxy)
        assert answer.choices[0].message.content
        assert [r["key"] for r in demo_upstream.requests(request_id)] == [UPSTREAM_KEYS[1]]

    second.get_by_role("button", name="Disable acct-2").click()
    expect(second).to_have_attribute("data-state", "disabled")
    with pytest.raises(openai.APIStatusError) as refused:
        chat(page_proxy)
    assert refused.value.status_code == 503
    assert "2 disabled" in refused.value.message and "admin: disabled on the status page" in refused.value.message

    for account, row in (("acct-1", first), ("acct-2", second)):
        row.get_by_role("button", name=f"Enable {account}").click()
        expect(row).to_have_attribute("data-state", "active")
    request_id, _ = chat(page_proxy)
    assert len(demo_upstream.requests(request_id)) == 1
    browser.refresh()
    expect(page.locator(".section-error:visible")).to_have_count(0)  # every view read its endpoint


def test_a_request_appears_in_the_usage_chart_and_the_last_requests(browser: Browser, page_proxy: ProxyServer) -> None:
    page = browser.page
    model = f"chart-{uuid.uuid4().hex[:8]}"  # a model no other request used: its series counts exactly this one
    browser.open()
    browser.sign_in()
    expect(page.locator("#usage-model svg")).to_be_visible()
    expect(page.locator(f'#usage-model rect[data-series="{model}"]')).to_have_count(0)

    request_id, answer = chat(page_proxy, model=model)
    browser.refresh()
    bar = page.locator(f'#usage-model rect[data-series="{model}"]')
    expect(bar).to_have_count(1)
    assert bar.get_attribute("data-value") == "1"
    legend = page.locator(f'#usage-model .legend tr[data-series="{model}"] td.num')
    expect(legend.first).to_have_text("1")  # requests
    assert legend.nth(2).inner_text() == str(answer.usage.prompt_tokens)  # input tokens, to the token
    assert legend.nth(3).inner_text() == str(answer.usage.completion_tokens)

    row = page.locator(f'#requests tr[data-request-id="{request_id}"]')
    expect(row).to_have_attribute("data-outcome", "ok")
    cells = row.locator("td")
    assert cells.nth(3).inner_text() == "127.0.0.1"  # the client's address, as the access log shows it
    assert cells.nth(5).inner_text() == model and cells.nth(6).inner_text().startswith("main · acct-")
    assert cells.nth(8).inner_text() == "200"
    assert cells.nth(12).inner_text() == f"{answer.usage.prompt_tokens} / {answer.usage.completion_tokens}"

    page.get_by_role("button", name="Tokens").click()  # the same data, measured in tokens
    assert bar.get_attribute("data-value") == str(answer.usage.prompt_tokens + answer.usage.completion_tokens)
    for period in ("Last day", "Last 30 days"):
        page.get_by_role("button", name=period).click()
        expect(page.locator(f'#usage-model rect[data-series="{model}"]')).to_have_count(1)


def test_spend_shows_per_key_model_and_account_beside_tokens(browser: Browser, page_proxy: ProxyServer) -> None:
    page = browser.page
    model = f"spend-{uuid.uuid4().hex[:8]}"
    browser.open()
    browser.sign_in()
    expect(page.locator("#usage-model svg")).to_be_visible()
    request_id, answer = chat(page_proxy, model=model)
    details = answer.usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details else 0
    micros = Decimal(answer.usage.prompt_tokens - cached) + Decimal("0.1") * cached + 4 * answer.usage.completion_tokens
    cost = int(micros.quantize(Decimal(1), rounding=ROUND_HALF_UP))
    shown = f"${cost / 1e6:.6f}" if cost < 10_000 else f"${cost / 1e6:.4f}"
    browser.refresh()
    page.get_by_role("button", name="Spend").click()  # the charts measured in dollars
    bar = page.locator(f'#usage-model rect[data-series="{model}"]')
    expect(bar).to_have_count(1)
    assert Decimal(bar.get_attribute("data-value")) == Decimal(cost).scaleb(-6)
    spend = page.locator(f'#usage-model .legend tr[data-series="{model}"] td[data-column="Spend"]')
    expect(spend).to_have_text(shown)
    # Per key and per account too: the key's and the account's spend include this request's.
    account = answer_account(page_proxy, request_id)
    for figure, series in (("client_key", key_name(CLIENT_KEY)), ("account", account)):
        row = page.locator(f'#usage-{figure} .legend tr[data-series="{series}"]')
        expect(row.locator('td[data-column="Spend"]')).to_contain_text("$")
        assert row.locator('td[data-column="Spend"]').inner_text() != "$0"
        expect(row.locator('td[data-column="Cache hit"]')).to_contain_text("%")
        expect(row.locator('td[data-column="Cache saved"]')).to_contain_text("$")
    row = page.locator(f'#requests tr[data-request-id="{request_id}"]')
    expect(row.locator('td[data-column="cost"]')).to_have_text(shown)


def answer_account(proxy: ProxyServer, request_id: str) -> str:
    resp = request(proxy.url, "GET", "/admin/requests?limit=50", None, {"Authorization": f"Bearer {ADMIN_KEY}"})
    entry = next(e for e in resp.json()["data"] if e["request_id"] == request_id)
    resp.close()
    return str(entry["account"])


def test_the_open_streams_count_follows_a_held_stream(
        browser: Browser, page_proxy: ProxyServer, demo_upstream: DemoUpstream) -> None:
    page = browser.page
    browser.open()
    browser.sign_in()
    expect(page.locator("#open-streams")).to_have_text("0")

    request_id = f"page-hold-{uuid.uuid4().hex}"
    stream = request(page_proxy.url, "POST", "/v1/chat/completions",
                     {"model": "demo-model", "stream": True, "messages": [{"role": "user", "content": "[demo:hold] [demo:pace=0]"}]},
                     {"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": request_id})
    try:
        assert stream.status == 200 and stream.next_chunk()  # the stream is open: its first frame arrived
        browser.refresh()
        expect(page.locator("#open-streams")).to_have_text("1")
        demo_upstream.control(f"/_demo/release?request_id={request_id}")
        assert b"data: [DONE]" in b"".join(stream.rest())
    finally:
        stream.close()
    browser.refresh()
    expect(page.locator("#open-streams")).to_have_text("0")


def test_a_failed_call_is_shown_with_the_apis_message_and_the_data_marked_stale(browser: Browser) -> None:
    page = browser.page
    browser.open()
    browser.sign_in()
    usage = page.locator('[data-section="usage"]')
    expect(usage.locator(".updated")).to_contain_text("updated")
    # The proxy's own error envelope, as a failing /admin/usage would answer.
    page.route("**/admin/usage?**", lambda route: route.fulfill(
        status=503, content_type="application/json",
        body='{"error": {"message": "usage store unavailable: database is locked", "type": "api_error"}}'))
    browser.refresh()
    expect(usage.locator(".section-error")).to_contain_text("usage store unavailable: database is locked")
    expect(usage.locator(".section-error")).to_contain_text("showing data from")
    expect(usage).to_have_class("panel stale")
    expect(page.locator("#freshness")).to_contain_text("3 of 9 calls failed")
    page.unroute("**/admin/usage?**")
    browser.refresh()
    expect(usage.locator(".section-error")).to_be_hidden()
    expect(page.locator("#freshness")).to_contain_text("Updated")


def test_a_key_the_proxy_stops_accepting_signs_the_page_out(browser: Browser) -> None:
    page = browser.page
    browser.open()
    browser.sign_in()
    expect(page.locator("#dashboard")).to_be_visible()
    page.evaluate("sessionStorage.setItem('llm-proxy-admin-key', 'sk-revoked')")  # as after a config reload
    browser.refresh()
    expect(page.locator("#sign-in-error")).to_contain_text("no longer accepts this key")
    expect(page.locator("#dashboard")).to_be_hidden()
    assert page.evaluate("sessionStorage.length") == 0
