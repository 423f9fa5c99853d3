"""Codex CLI itself over the Responses WebSocket (`GET /v1/responses`), as users run it: a custom
provider with `supports_websockets = true`, and OpenAI's built-in provider pointed at the proxy
(`openai_base_url`), which also compacts its sessions remotely (a `compaction_trigger` request).

Opt-in like the other real-client tests (Codex comes from npm):

    LLM_PROXY_CLIENTS_BIN=~/llm-clients/node_modules/.bin python -m pytest tests/e2e/test_codex_websocket.py

Each test asserts that the proxy served the socket — and that Codex did not fall back to HTTP
(`POST /v1/responses` in the access log) — and prints what went over the socket, from the proxy's
`websocket closed` log line (frames received by type, frames sent).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.demo.scenarios import ANSWER
from proxy.protocols.responses.compaction import SUMMARY_HEADER
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy

BIN = os.environ.get("LLM_PROXY_CLIENTS_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="set LLM_PROXY_CLIENTS_BIN to run Codex end to end")

CLOSED = re.compile(r"websocket closed rid=(\S+) responses=(\d+) received=(\S+) sent=(\d+)")


@pytest.fixture(scope="module", params=["chat_completions", "messages", "responses"])
def any_upstream(request: pytest.FixtureRequest, demo_upstream: DemoUpstream,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    config = base_config(demo_upstream.url)
    config["upstreams"][0]["protocol"] = request.param
    server = start_proxy(config, tmp_path_factory.mktemp(f"codex-ws-{request.param}"))
    yield server
    stop_proxy(server)


def codex(proxy: ProxyServer, home: Path, prompt: str, builtin_openai: bool = False,
          compact_at: int | None = None) -> subprocess.CompletedProcess[str]:
    codex_home = home / "codex-home"
    codex_home.mkdir(exist_ok=True)
    config = 'model = "demo-model"\n'
    if compact_at is not None:
        config += f"model_auto_compact_token_limit = {compact_at}\n"
    if builtin_openai:  # OpenAI's own provider: WebSocket by default, and remote compaction
        config += f'openai_base_url = "{proxy.url}/v1"\n'
        env_key = {"OPENAI_API_KEY": CLIENT_KEY, "CODEX_API_KEY": CLIENT_KEY}
    else:
        config += ('model_provider = "llmproxy"\n\n[model_providers.llmproxy]\nname = "llm-proxy"\n'
                   f'base_url = "{proxy.url}/v1"\nenv_key = "LLMPROXY_API_KEY"\nwire_api = "responses"\n'
                   "supports_websockets = true\n")
        env_key = {"LLMPROXY_API_KEY": CLIENT_KEY}
    (codex_home / "config.toml").write_text(config)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(codex_home), **env_key}
    return subprocess.run([str(Path(BIN or "") / "codex"), "exec", "--skip-git-repo-check", prompt], cwd=home, env=env,
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def served_over_the_socket(proxy: ProxyServer, before: int) -> list[re.Match[str]]:
    """The sockets Codex opened since the log had `before` characters; none of its requests fell
    back to HTTP."""
    log = proxy.log()[before:]
    assert '"POST /v1/responses' not in log, "Codex fell back to HTTP"
    sockets = list(CLOSED.finditer(log))
    assert sockets and sum(int(m.group(2)) for m in sockets) > 0
    for m in sockets:
        print(f"socket {m.group(1)}: responses={m.group(2)} received={m.group(3)} sent={m.group(4)}")
    return sockets


def test_codex_answers_over_the_websocket(any_upstream: ProxyServer, tmp_path: Path) -> None:
    before = len(any_upstream.log())
    result = codex(any_upstream, tmp_path, "Say hello")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("Hello from the llm-proxy demo upstream.")
    served_over_the_socket(any_upstream, before)


def test_codex_runs_a_tool_round_trip_over_the_websocket(any_upstream: ProxyServer, tmp_path: Path) -> None:
    before = len(any_upstream.log())
    result = codex(any_upstream, tmp_path, "Run ls in this directory")
    assert result.returncode == 0, result.stderr
    assert "echo hello from the llm-proxy demo" in result.stderr
    assert "hello from the llm-proxy demo" in result.stdout and "That completes the task." in result.stdout
    sockets = served_over_the_socket(any_upstream, before)
    # The tool's output went back on the socket as a second response.create of the turn.
    assert sum(int(m.group(2)) for m in sockets) >= 2


def test_a_codex_session_compacts_over_the_websocket(any_upstream: ProxyServer, demo_upstream: DemoUpstream,
                                                     tmp_path: Path) -> None:
    before = len(any_upstream.log())
    # Codex's first request alone is ~5k tokens: the limit makes it compact mid-turn, after the tool call.
    result = codex(any_upstream, tmp_path, "Run ls in this directory", builtin_openai=True, compact_at=3000)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "context compacted" in result.stderr + result.stdout
    assert "echo hello from the llm-proxy demo" in result.stderr
    sockets = served_over_the_socket(any_upstream, before)
    # What reached the upstream, response by response: the compaction request, then the turn that
    # continued from the compacted history.
    sent = [r["body"] for m in sockets for n in range(1, int(m.group(2)) + 1)
            for r in demo_upstream.requests(f"{m.group(1)}-{n}")]
    text = [str(body) for body in sent]
    if "'type': 'compaction_trigger'" in " ".join(text):  # a Responses upstream compacts itself
        assert any("demo-compaction." in t for t in text)
    else:
        assert any("Context checkpoint" in t for t in text)  # the proxy asked the model for a summary
        assert any(SUMMARY_HEADER.strip() in t and ANSWER[:40] in t for t in text)  # and expanded it later
