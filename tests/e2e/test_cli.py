"""The `llm-proxy` command as a user runs it: `serve` with a config, and `demo` with the snippets
it prints pasted and run, its admin key and its simulated upstream used as printed."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from openai import OpenAI

from tests.conftest import CLIENT_KEY, ROOT, DemoUpstream, base_config, listening_socket

LLM_PROXY = [sys.executable, "-m", "proxy.serving.cli"]


def test_serve_command_serves_the_config(tmp_path: Path, demo_upstream: DemoUpstream) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(base_config(demo_upstream.url)))
    sock = listening_socket()
    port = sock.getsockname()[1]
    proc = subprocess.Popen([*LLM_PROXY, "serve", "--config", str(config), "--bind", f"fd://{sock.fileno()}"],
                            pass_fds=[sock.fileno()], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    sock.close()
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="demo-model", stream=True, messages=[{"role": "user", "content": "hi [demo:pace=0]"}]))
        assert text.startswith("Hello from the llm-proxy demo upstream.")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)


def test_serve_says_once_that_a_deprecated_key_has_no_effect(tmp_path: Path, demo_upstream: DemoUpstream) -> None:
    """An older config still serves; the key that no longer does anything is named in one warning
    line when the server starts — not one per worker."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(base_config(demo_upstream.url, streaming={"queue_size": 64})))
    sock = listening_socket()
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*LLM_PROXY, "serve", "--config", str(config), "--bind", f"fd://{sock.fileno()}",
                                 "--workers", "2"], pass_fds=[sock.fileno()], cwd=tmp_path, stdout=log, stderr=log)
    port = sock.getsockname()[1]
    sock.close()
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
        for _ in range(4):
            answer = client.chat.completions.create(model="demo-model",
                                                    messages=[{"role": "user", "content": "hi [demo:pace=0]"}])
            assert answer.choices[0].message.content
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
    lines = [line for line in log_path.read_text().splitlines() if "queue_size" in line]
    assert len(lines) == 1, lines
    assert re.search(r" WARNING \[-\] proxy\.config: streaming\.queue_size: has no effect and is deprecated ", lines[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", params=["chat_completions", "messages", "responses", "gemini"])
def demo(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """`llm-proxy demo` running, its simulated upstream spoken to in each protocol in turn;
    yields (base URL, the banner it printed)."""
    port = free_port()
    proc = subprocess.Popen([*LLM_PROXY, "demo", "--bind", f"127.0.0.1:{port}", "--upstream-protocol", request.param],
                            cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "LLM_PROXY_ACCESS_LOG": "/dev/null"})
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # the banner is printed once the proxy's socket is listening
        lines.append(line)
        if "Ctrl-C stops" in line:
            break
    try:
        yield f"http://127.0.0.1:{port}", "".join(lines)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)


def snippet(banner: str, title: str) -> str:
    """The indented code block under `title` in the banner."""
    block = banner.split(title, 1)[1].split("\n\n", 2)[1]
    return "\n".join(line[2:] for line in block.splitlines())


def test_demo_prints_what_a_user_needs(demo: tuple[str, str]) -> None:
    url, banner = demo
    assert f"Base URL:    {url}/v1" in banner
    assert "Client key:  sk-demo" in banner
    assert f"Status page: {url}/admin/ (sign in with the admin key)" in banner
    assert re.search(r"^  Upstream:    http://127\.0\.0\.1:\d+/v1 \(simulated", banner, re.MULTILINE)
    assert "run it alone: python -m proxy.demo --port 9000" in banner
    # The startup summary comes first, as for `serve`.
    assert f"serving {url} (master pid" in banner and "  workers:    1 gevent worker" in banner


def get_json(url: str, key: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=20) as resp:
        return json.loads(resp.read())


def test_demo_admin_key_and_upstream_work_as_printed(demo: tuple[str, str]) -> None:
    url, banner = demo
    (admin_key,) = re.findall(r"^  Admin key:   (sk-demo-admin-[0-9a-f]{16})$", banner, re.MULTILINE)
    listing = get_json(f"{url}/admin/accounts", admin_key)
    assert [a["id"] for a in listing["upstreams"][0]["accounts"]] == ["demo-1", "demo-2"]
    command = snippet(banner, "The pool's accounts, as the admin API shows them:")
    assert command == f"curl {url}/admin/accounts -H 'Authorization: Bearer {admin_key}'"
    (upstream,) = re.findall(r"^  Upstream:    (\S+) ", banner, re.MULTILINE)
    models = get_json(f"{upstream}/models", "any-key")
    assert "demo-model" in [m["id"] for m in models["data"]]


def test_the_simulated_upstream_runs_alone_as_printed(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "proxy.demo", "--port", str(port)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"demo upstream listening on http://127.0.0.1:{port}/v1"
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="any-key", max_retries=0, timeout=20)
        answer = client.chat.completions.create(model="demo-model", messages=[
            {"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}])
        assert (answer.choices[0].message.content or "").split() == ["Hello", "from"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("title", ["OpenAI SDK (pip install openai):", "Anthropic SDK (pip install anthropic):",
                                   "google-genai SDK (pip install google-genai):"])
def test_demo_sdk_snippets_run(demo: tuple[str, str], title: str) -> None:
    _, banner = demo
    out = subprocess.run([sys.executable, "-c", snippet(banner, title)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Hello from the llm-proxy demo upstream.")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed on this machine")
def test_demo_curl_snippet_streams_word_by_word(demo: tuple[str, str]) -> None:
    _, banner = demo
    command = snippet(banner, "curl (watch the answer arrive word by word):").replace("\\\n", " ")
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    frames = re.findall(r"^data: .*$", out.stdout, re.MULTILINE)
    assert len(frames) > 30 and frames[-1] == "data: [DONE]"

