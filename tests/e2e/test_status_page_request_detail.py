"""The status page's request detail in headless Chromium against a live gunicorn + gevent proxy with
the request log on, in front of the demo upstream: a streamed Messages request (the Anthropic SDK,
translated to the demo's Chat Completions) opened from its row's "details" button with the
keyboard — its four bodies side by side, the stream's chunks with their times, its one attempt —, a
whole OpenAI request's JSON pretty-printed, a retried request's attempts chosen one by one, a
request the log does not keep without a button, and a viewer key seeing the metadata and no body.

Skipped or required as tests/e2e/test_status_page.py says (its module-level checks run on import);
the detail panel's screenshot goes beside the page's in each test's `test-output/` folder.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from anthropic import Anthropic

from tests.conftest import CLIENT_KEY, UPSTREAM_KEYS, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.e2e.test_status_page import ADMIN_KEY, Browser, browser, chat, expect, playwright  # noqa: F401
from tests.wire import request

VIEWER_KEY = "sk-viewer-browser-test"
QUIET_KEY = {"name": "quiet", "key": "sk-quiet-browser-test"}  # a key whose requests the log does not keep
PARTS = ("client_request", "upstream_request", "upstream_response", "client_response")


@pytest.fixture(scope="module")
def page_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    """Overrides test_status_page's: the same page, with the request log on for the test client's key."""
    config = base_config(demo_upstream.url, client_keys=[CLIENT_KEY, QUIET_KEY],
                         admin_keys=[ADMIN_KEY, {"name": "watcher", "key": VIEWER_KEY, "role": "viewer"}],
                         request_log={"enabled": True, "keys": ["key-*"]})
    config["upstreams"][0]["pool"] = {"probe": {"interval": 3600}}  # no probe takes the scripted 429
    server = start_proxy(config, tmp_path_factory.mktemp("request-detail"))
    yield server
    stop_proxy(server)


@dataclass(frozen=True)
class Sent:
    stream_id: str
    whole_id: str
    quiet_id: str
    marker: str  # a word in the streamed request's prompt, and in no other request


@pytest.fixture(scope="module")
def sent(page_proxy: ProxyServer) -> Sent:
    marker = f"zebra-{uuid.uuid4().hex[:8]}"
    stream_id = f"page-stream-{uuid.uuid4().hex}"
    claude = Anthropic(base_url=page_proxy.url, api_key=CLIENT_KEY, max_retries=0, timeout=20)
    with claude.messages.stream(model="demo-model", max_tokens=100, extra_headers={"x-request-id": stream_id},
                                messages=[{"role": "user", "content": f"<b>{marker}</b> [demo:pace=5] [demo:words=6]"}]) as s:
        assert s.get_final_text()
    whole_id, answer = chat(page_proxy)
    assert answer.choices[0].message.content
    quiet = openai.OpenAI(base_url=f"{page_proxy.url}/v1", api_key=QUIET_KEY["key"], max_retries=0, timeout=20)
    quiet_id = f"page-quiet-{uuid.uuid4().hex}"
    quiet.chat.completions.create(model="demo-model", messages=[{"role": "user", "content": "hi [demo:pace=0]"}],
                                  extra_headers={"x-request-id": quiet_id})
    return Sent(stream_id, whole_id, quiet_id, marker)


def details_button(session: Browser, request_id: str) -> Any:
    return session.page.locator(f'#requests tr[data-request-id="{request_id}"]').get_by_role("button", name="details")


def fact(session: Browser, name: str) -> Any:
    return session.page.locator("#request-detail .facts > div").filter(
        has=session.page.get_by_text(name, exact=True)).locator("dd")


def pane(session: Browser, part: str) -> Any:
    return session.page.locator(f'#request-detail [data-part="{part}"]')


def snapshot(session: Browser, tmp_path: Path, name: str) -> None:
    output = tmp_path / "test-output"
    output.mkdir(exist_ok=True)
    session.page.locator("#request-detail").screenshot(path=str(output / name))
    print(f"screenshot: {output / name}")


def test_a_streamed_request_shows_its_four_bodies_its_events_and_its_attempt(
        browser: Browser, sent: Sent, tmp_path: Path) -> None:  # noqa: F811
    page = browser.page
    browser.open()
    browser.sign_in()
    quiet_row = page.locator(f'#requests tr[data-request-id="{sent.quiet_id}"]')
    expect(quiet_row).to_be_visible()
    expect(quiet_row.get_by_role("button")).to_have_count(0)  # not kept: no details
    detail = page.locator("#request-detail")
    expect(detail).to_be_hidden()

    button = details_button(browser, sent.stream_id)
    button.focus()
    page.keyboard.press("Enter")
    expect(detail).to_be_visible()
    expect(page.locator("#detail-title")).to_have_text(f"Request {sent.stream_id}")
    for name, value in (("Model", "demo-model"), ("Status", "200"), ("Outcome", "ok"), ("Stream", "yes"),
                        ("Kept because", "sampled")):
        expect(fact(browser, name)).to_have_text(value)
    expect(fact(browser, "Duration")).to_have_text(re.compile(r"^\d+ ms$"))

    attempts = detail.locator("table.attempts tbody tr")
    expect(attempts).to_have_count(1)
    expect(attempts.first).to_contain_text("main · acct-")
    expect(detail.get_by_role("group", name="Attempt shown")).to_have_count(0)  # one attempt: nothing to choose

    expect(pane(browser, "client_request")).to_contain_text(sent.marker)
    expect(pane(browser, "client_request")).to_contain_text("POST /v1/messages")
    expect(pane(browser, "upstream_request")).to_contain_text(sent.marker)  # translated, still the prompt
    expect(pane(browser, "upstream_response")).to_contain_text("data:")
    expect(pane(browser, "client_response")).to_contain_text("message_stop")
    client_headers = pane(browser, "client_request").locator("details")
    client_headers.locator("summary").click()
    expect(client_headers.locator("pre")).to_contain_text(f"x-request-id: {sent.stream_id}")
    expect(client_headers.locator("pre")).to_contain_text(re.compile(r"(x-api-key|authorization): \[redacted\]"))
    expect(detail).not_to_contain_text("[object")
    # The client's markup arrived as text: shown, never made into an element.
    expect(pane(browser, "client_request").locator(":scope > pre")).to_contain_text(f"<b>{sent.marker}</b>")
    assert detail.locator("pre b").count() == 0

    events = pane(browser, "client_response").locator("ol.events > li")
    expect(events.first.locator(".t")).to_have_text(re.compile(r"^\+\d+ ms$"))
    assert events.count() >= 3
    times = [int(t.strip("+ ms")) for t in events.locator(".t").all_inner_texts()]
    assert times == sorted(times)
    texts = events.locator("pre").all_inner_texts()
    assert texts[0].startswith("event: message_start") and any("message_stop" in t for t in texts)
    expect(pane(browser, "upstream_response").locator("ol.events > li").first).to_contain_text("data:")

    boxes = [pane(browser, part).bounding_box() for part in PARTS]  # side by side on a wide screen
    assert len({round(b["y"]) for b in boxes}) == 1 and [b["x"] for b in boxes] == sorted(b["x"] for b in boxes)
    snapshot(browser, tmp_path, "request-detail.png")

    page.keyboard.press("Escape")
    expect(detail).to_be_hidden()
    expect(details_button(browser, sent.stream_id)).to_be_focused()  # back where the reader was


def test_a_whole_answer_is_pretty_printed_json(browser: Browser, sent: Sent, tmp_path: Path) -> None:  # noqa: F811
    page = browser.page
    browser.open()
    browser.sign_in()
    details_button(browser, sent.whole_id).click()
    expect(page.locator("#detail-title")).to_have_text(f"Request {sent.whole_id}")
    body = pane(browser, "client_response").locator(":scope > pre")
    expect(body).to_contain_text('"choices": [')
    assert '\n  "choices": [' in body.inner_text()  # indented, not as the wire had it
    expect(pane(browser, "client_request")).to_contain_text("POST /v1/chat/completions")
    expect(page.locator("#request-detail ol.events")).to_have_count(0)
    snapshot(browser, tmp_path, "request-detail-whole.png")
    page.get_by_role("button", name="Close").click()
    expect(page.locator("#request-detail")).to_be_hidden()


def test_a_retried_request_shows_each_attempts_bodies(
        browser: Browser, page_proxy: ProxyServer, demo_upstream: DemoUpstream, tmp_path: Path) -> None:  # noqa: F811
    demo_upstream.control("/_demo/keys", body={UPSTREAM_KEYS[0]: {
        "status": 429, "body": {"error": {"message": "slow down", "type": "rate_limit_error"}},
        "headers": {"Retry-After": "1"}, "times": 1}})
    try:
        for _ in range(3):  # either account may be leased first: the 429 is scripted on the first one's key
            request_id, _ = chat(page_proxy)
            if attempts_of(page_proxy, request_id) == 2:
                break
        assert attempts_of(page_proxy, request_id) == 2
    finally:
        demo_upstream.control("/_demo/keys", method="DELETE")
    page = browser.page
    browser.open()
    browser.sign_in()
    details_button(browser, request_id).click()
    detail = page.locator("#request-detail")
    expect(detail.locator("table.attempts tbody tr")).to_have_count(2)
    chooser = detail.get_by_role("group", name="Attempt shown")
    last = chooser.get_by_role("button", name="Attempt 2 (200)")
    expect(last).to_have_attribute("aria-pressed", "true")  # the last attempt is shown first
    expect(pane(browser, "upstream_response")).to_contain_text('"choices": [')
    chooser.get_by_role("button", name="Attempt 1 (429)").focus()
    page.keyboard.press("Enter")
    expect(pane(browser, "upstream_response")).to_contain_text("slow down")
    expect(pane(browser, "upstream_response")).to_contain_text("attempt 1: HTTP 429")
    expect(chooser.get_by_role("button", name="Attempt 1 (429)")).to_have_attribute("aria-pressed", "true")
    expect(chooser.get_by_role("button", name="Attempt 1 (429)")).to_be_focused()  # drawn again, focus kept
    expect(detail.locator("table.attempts tr.chosen")).to_have_attribute("data-attempt", "1")
    expect(pane(browser, "client_response")).to_contain_text('"choices": [')  # the client's answer stays
    snapshot(browser, tmp_path, "request-detail-attempts.png")


def attempts_of(proxy: ProxyServer, request_id: str) -> int:
    resp = request(proxy.url, "GET", f"/admin/requests/{request_id}", None, {"Authorization": f"Bearer {ADMIN_KEY}"})
    doc = json.loads(resp.body())
    resp.close()
    return len(doc.get("attempts", []))


def test_a_viewer_sees_the_metadata_and_attempts_but_no_body(browser: Browser, sent: Sent, tmp_path: Path) -> None:  # noqa: F811
    page = browser.page
    browser.open()
    browser.sign_in(VIEWER_KEY)
    expect(page.locator("#whoami")).to_have_text("watcher (viewer)")
    details_button(browser, sent.stream_id).click()
    detail = page.locator("#request-detail")
    expect(detail).to_contain_text("admin keys only")
    expect(detail.locator("table.attempts tbody tr")).to_have_count(1)
    expect(fact(browser, "Model")).to_have_text("demo-model")
    expect(detail.locator("[data-part]")).to_have_count(0)
    expect(detail).not_to_contain_text(sent.marker)
    assert sent.marker not in page.content()
    snapshot(browser, tmp_path, "request-detail-viewer.png")
    page.locator("#sign-out").click()  # signing out leaves nothing of the request on screen
    expect(detail).to_be_hidden()
    assert page.locator("#detail-content > *").count() == 0
