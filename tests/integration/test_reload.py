"""Config reload through a live proxy: SIGHUP and POST /admin/reload switch new requests to the
new file while a stream in flight finishes on the old one; an invalid file changes nothing and
says why in one line; accounts added or removed through the admin API are an overlay the file
wins over at a reload; every worker switches."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from openai import OpenAI

from proxy.demo.scenarios import ANSWER
from tests import audit
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY, admin
from tests.wire import request


def one_upstream(demo: DemoUpstream, name: str, keys: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"client_keys": [CLIENT_KEY], "admin_keys": [ADMIN_KEY], **extra, "upstreams": [{
        "name": name, "protocol": "chat_completions", "base_url": demo.url, "pool": {"probe": {"interval": 3600}},
        "accounts": [{"id": account_id, "api_key": key} for account_id, key in keys.items()]}]}


def rewrite(server: ProxyServer, config: dict[str, Any]) -> None:
    """The proxy's config file, edited in place as an operator would."""
    audit.register((a["api_key"] for u in config["upstreams"] for a in u["accounts"]), server.log_path)
    path = server.log_path.parent / "config.yaml"
    config.setdefault("state_path", yaml.safe_load(path.read_text())["state_path"])
    path.write_text(yaml.safe_dump(config))


def served_config(server: ProxyServer) -> dict[str, Any]:
    status, body = admin(server, "GET", "/admin/config")
    assert status == 200
    return dict(body)


def until(check: Any, seconds: float = 15) -> Any:
    """Poll an observable of the server (an endpoint, its log) until `check` gives a truthy value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
    raise AssertionError("the server never showed it")


def client(server: ProxyServer) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=30)


def keys_seen(demo: DemoUpstream, request_id: str) -> list[str]:
    return [r["key"] for r in demo.requests(request_id)]


def test_sighup_switches_new_requests_while_a_stream_in_flight_finishes_on_the_old_upstream(
        demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(one_upstream(demo_upstream, "before", {"b1": "sk-reload-before"}), tmp_path)
    try:
        held = f"held-{uuid.uuid4().hex}"
        stream = client(server).chat.completions.create(
            model="demo-model", stream=True, extra_headers={"X-Request-Id": held},
            messages=[{"role": "user", "content": "hi [demo:hold] [demo:words=12] [demo:pace=0]"}])
        chunks = iter(stream)
        first = next(chunks)  # the upstream holds the stream after its first chunk
        assert keys_seen(demo_upstream, held) == ["sk-reload-before"]

        rewrite(server, one_upstream(demo_upstream, "after", {"a1": "sk-reload-after"}))
        server.process.send_signal(signal.SIGHUP)
        until(lambda: served_config(server)["generation"] == 2)

        fresh = f"fresh-{uuid.uuid4().hex}"
        answer = client(server).chat.completions.create(
            model="demo-model", extra_headers={"X-Request-Id": fresh},
            messages=[{"role": "user", "content": "hi [demo:words=3] [demo:pace=0]"}])
        assert (answer.choices[0].message.content or "").split() == ANSWER.split()[:3]
        assert keys_seen(demo_upstream, fresh) == ["sk-reload-after"]

        demo_upstream.control(f"/_demo/release?request_id={held}")
        rest = list(chunks)
        text = "".join(c.choices[0].delta.content or "" for c in [first, *rest] if c.choices)
        assert text.split() == ANSWER.split()[:12]
        assert rest[-1].choices[0].finish_reason == "stop"  # ended properly, on the upstream it began on
        assert keys_seen(demo_upstream, held) == ["sk-reload-before"]

        status, listing = admin(server, "GET", "/admin/accounts")
        assert status == 200 and [u["name"] for u in listing["upstreams"]] == ["after"]
        log = server.log()
        assert "config reloaded from" in log and "Traceback" not in log
    finally:
        stop_proxy(server)


def test_an_invalid_file_is_refused_with_one_line_and_the_proxy_serves_on(demo_upstream: DemoUpstream,
                                                                          tmp_path: Path) -> None:
    good = one_upstream(demo_upstream, "main", {"m1": "sk-reload-keep"})
    server = start_proxy(good, tmp_path)
    try:
        assert served_config(server)["generation"] == 1  # up, and its signal handlers with it
        broken = one_upstream(demo_upstream, "main", {"m1": "sk-reload-keep"})
        broken["upstreams"][0]["bse_url"] = broken["upstreams"][0].pop("base_url")  # the typo
        rewrite(server, broken)
        server.process.send_signal(signal.SIGHUP)
        refused = until(lambda: [line for line in server.log().splitlines() if "config reload refused" in line])
        assert len(refused) == 1 and "upstreams[0].bse_url: unknown key" in refused[0], refused

        status, body = admin(server, "POST", "/admin/reload")
        assert status == 400
        assert body["error"]["message"].startswith("The config was not reloaded: upstreams[0].bse_url: unknown key")

        rid = f"still-{uuid.uuid4().hex}"
        answer = client(server).chat.completions.create(
            model="demo-model", extra_headers={"X-Request-Id": rid},
            messages=[{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
        assert answer.choices[0].finish_reason == "stop" and keys_seen(demo_upstream, rid) == ["sk-reload-keep"]
        assert served_config(server)["generation"] == 1 and server.process.poll() is None

        elsewhere = {**good, "state_path": str(tmp_path / "other.db")}  # a reload cannot move the state file
        rewrite(server, elsewhere)
        status, body = admin(server, "POST", "/admin/reload")
        assert status == 400 and "state_path: cannot change on a reload" in body["error"]["message"]
        rewrite(server, {**good, "logging": {"format": "json"}})  # nor gunicorn's logger
        status, body = admin(server, "POST", "/admin/reload")
        assert status == 400 and "logging.format: cannot change on a reload" in body["error"]["message"]
        assert admin(server, "GET", "/admin/status")[1]["reloaded_at"] is None

        good["upstreams"][0]["accounts"] = [{"id": "m2", "api_key": "sk-reload-fixed"}]
        rewrite(server, good)
        status, body = admin(server, "POST", "/admin/reload")
        assert status == 200 and body["reloaded"] is True and body["generation"] == 2
        assert admin(server, "GET", "/admin/status")[1]["reloaded_at"].endswith("Z")
        rid = f"fixed-{uuid.uuid4().hex}"
        client(server).chat.completions.create(model="demo-model", extra_headers={"X-Request-Id": rid},
                                               messages=[{"role": "user", "content": "hi [demo:pace=0]"}])
        assert keys_seen(demo_upstream, rid) == ["sk-reload-fixed"]
        assert "Traceback" not in server.log()
    finally:
        stop_proxy(server)


def test_runtime_changes_are_an_overlay_the_file_wins_over_at_a_reload(demo_upstream: DemoUpstream,
                                                                       tmp_path: Path) -> None:
    config = one_upstream(demo_upstream, "main", {"file-1": "sk-overlay-1", "file-2": "sk-overlay-2"})
    server = start_proxy(config, tmp_path)
    try:
        assert admin(server, "DELETE", "/admin/accounts/main/file-2")[0] == 200
        assert admin(server, "POST", "/admin/accounts/main", {"id": "extra", "api_key": "sk-overlay-extra"})[0] == 201

        def listing() -> dict[str, Any]:
            _, body = admin(server, "GET", "/admin/accounts")
            (main,) = body["upstreams"]
            return {"origin": {a["id"]: a["origin"] for a in main["accounts"]}, "removed": main["removed_at_runtime"]}

        assert listing() == {"origin": {"file-1": "config", "extra": "runtime"}, "removed": ["file-2"]}

        status, body = admin(server, "POST", "/admin/reload")  # the same file, read again
        assert status == 200 and body["generation"] == 2
        assert listing() == {"origin": {"file-1": "config", "file-2": "config", "extra": "runtime"}, "removed": []}

        # Both accounts really serve again: with the others out of rotation, each gets a request.
        for keep in ("file-2", "extra"):
            for other in {"file-1", "file-2", "extra"} - {keep}:
                admin(server, "POST", f"/admin/accounts/main/{other}/disable", {"reason": "test"})
            admin(server, "POST", f"/admin/accounts/main/{keep}/enable")
            rid = f"overlay-{keep}-{uuid.uuid4().hex}"
            client(server).chat.completions.create(model="demo-model", extra_headers={"X-Request-Id": rid},
                                                   messages=[{"role": "user", "content": "hi [demo:pace=0]"}])
            assert keys_seen(demo_upstream, rid) == [{"file-2": "sk-overlay-2", "extra": "sk-overlay-extra"}[keep]]

        # The file takes over an id the overlay added: it is the file's account from then on.
        config["upstreams"][0]["accounts"].append({"id": "extra", "api_key": "sk-overlay-extra-file"})
        rewrite(server, config)
        assert admin(server, "POST", "/admin/reload")[0] == 200
        assert listing()["origin"] == {"file-1": "config", "file-2": "config", "extra": "config"}
    finally:
        stop_proxy(server)


def test_sighup_reaches_every_worker(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(one_upstream(demo_upstream, "main", {"w1": "sk-reload-workers"}), tmp_path, workers=2)
    try:
        assert served_config(server)["generation"] == 1  # up, and its signal handlers with it
        rewrite(server, one_upstream(demo_upstream, "main", {"w2": "sk-reload-workers-2"}))
        server.process.send_signal(signal.SIGHUP)
        switched: dict[int, int] = {}

        def both() -> bool:  # fresh connections, spread over the workers by the kernel
            seen = served_config(server)
            switched[seen["worker"]] = seen["generation"]
            return len(switched) == 2 and set(switched.values()) == {2}

        until(both)
        assert os.getpid() not in switched
    finally:
        stop_proxy(server)


def test_reload_endpoints_need_an_admin_key(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(one_upstream(demo_upstream, "main", {"k1": "sk-reload-auth"}), tmp_path)
    try:
        for method, path in (("POST", "/admin/reload"), ("GET", "/admin/config")):
            resp = request(server.url, method, path, None, {"Authorization": f"Bearer {CLIENT_KEY}"})
            assert resp.status == 401 and "admin key" in resp.json()["error"]["message"]
            resp.close()
    finally:
        stop_proxy(server)
