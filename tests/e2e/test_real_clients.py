"""Real coding agents against the proxy in front of the simulated upstream, as a user runs them.

Opt-in, because the clients come from npm: install them once, then point the tests at them:

    npm install --prefix ~/llm-clients @anthropic-ai/claude-code @openai/codex ai @ai-sdk/openai @ai-sdk/anthropic
    LLM_PROXY_CLIENTS_BIN=~/llm-clients/node_modules/.bin python -m pytest tests/e2e/test_real_clients.py

They talk only to the proxy on loopback (telemetry and update checks disabled), from a scratch
home directory so no user configuration leaks in.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.demo.scenarios import CITED_ANSWER, CITED_SOURCE
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy

BIN = os.environ.get("LLM_PROXY_CLIENTS_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="set LLM_PROXY_CLIENTS_BIN to run Claude Code / Codex end to end")


def gemini_config(demo_upstream: DemoUpstream) -> dict[str, Any]:
    """The proxy in front of the demo's Gemini face, every model asked for as a Gemini 3 model — which
    the demo answers with thought signatures and enforces them on, as Gemini 3 does."""
    config = base_config(demo_upstream.root)
    config["upstreams"][0].update(protocol="gemini", models={"prefixes": {"*": "gemini-3-"}})
    return config


@pytest.fixture(scope="module", params=["chat_completions", "messages", "responses", "gemini"])
def any_upstream(request: pytest.FixtureRequest, demo_upstream: DemoUpstream,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    """The proxy in front of the demo speaking each upstream protocol in turn."""
    config = base_config(demo_upstream.url)
    config["upstreams"][0]["protocol"] = request.param
    if request.param == "gemini":
        config = gemini_config(demo_upstream)
    server = start_proxy(config, tmp_path_factory.mktemp(f"clients-{request.param}"))
    yield server
    stop_proxy(server)


def claude(proxy: ProxyServer, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": proxy.url, "ANTHROPIC_API_KEY": CLIENT_KEY,
        "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    return subprocess.run([str(Path(BIN or "") / "claude"), *args], cwd=home, env=env, capture_output=True,
                          text=True, timeout=180)


def test_claude_code_answers_a_prompt(any_upstream: ProxyServer, tmp_path: Path) -> None:
    result = claude(any_upstream, tmp_path, "-p", "Say hello")
    assert result.returncode == 0, result.stderr
    assert "Hello from the llm-proxy demo upstream." in result.stdout


def test_claude_code_runs_a_tool_round_trip(any_upstream: ProxyServer, demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    result = claude(any_upstream, tmp_path, "-p", "Run ls in the current directory", "--allowedTools", "Bash")
    assert result.returncode == 0, result.stderr
    # The simulated model asked Claude Code's Bash tool to echo; Claude Code ran it and sent the output back.
    assert "The tool returned: hello from the llm-proxy demo" in result.stdout


@pytest.fixture(scope="module")
def default_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    """The proxy with an OpenAI-compatible upstream and nothing configured about reasoning."""
    server = start_proxy(base_config(demo_upstream.url), tmp_path_factory.mktemp("clients-default"))
    yield server
    stop_proxy(server)


CHAIN_PROMPT = ("Run three shell commands, each echoing the previous one's output ({marker}) "
                "[demo:chain=3] [demo:require-reasoning] [demo:pace=0]")
CHAIN_ANSWER = "The tools returned, in order: step1 | step1 step2 | step1 step2 step3. That completes the task."


def assert_each_turns_reasoning_went_back(demo: DemoUpstream, marker: str) -> None:
    """Every request of the session reached the upstream with, on each assistant tool-call message,
    the reasoning of the turn that made that call (the demo's strict mode would have refused it
    otherwise: its reasoning names the step and the tool), and the session went through every turn."""
    turns_seen = set()
    for record in demo.requests(""):
        if marker not in json.dumps(record["body"]):
            continue
        calls = [m for m in record["body"]["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
        expected = [f"Step {n} of 3: I will call {m['tool_calls'][0]['function']['name']} with the previous result."
                    for n, m in enumerate(calls, 1)]
        # A client may ask more than once per turn (it retries, it counts tokens); each ask must pass.
        assert [m.get("reasoning_content") for m in calls] == expected
        turns_seen.add(len(calls))
    assert turns_seen == {0, 1, 2, 3}


def test_claude_code_runs_a_dependent_tool_chain_on_a_strict_reasoning_upstream(
        default_proxy: ProxyServer, demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    """A DeepSeek-style upstream in thinking mode refuses any request whose assistant tool-call
    messages lack their `reasoning_content`; Claude Code sends its thinking back as the blocks the
    proxy signed, and the proxy must return each turn's reasoning on the message that made the call."""
    marker = f"chain-{uuid.uuid4().hex[:12]}"
    result = claude(default_proxy, tmp_path, "-p", CHAIN_PROMPT.format(marker=marker), "--allowedTools", "Bash")
    assert result.returncode == 0, result.stdout + result.stderr
    assert CHAIN_ANSWER in result.stdout
    assert_each_turns_reasoning_went_back(demo_upstream, marker)


def test_codex_runs_a_dependent_tool_chain_on_a_strict_reasoning_upstream(
        default_proxy: ProxyServer, demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    """The same through the Responses API: Codex replays the reasoning items the proxy made."""
    marker = f"chain-{uuid.uuid4().hex[:12]}"
    result = codex(default_proxy, tmp_path, CHAIN_PROMPT.format(marker=marker))
    assert result.returncode == 0, result.stdout + result.stderr
    assert CHAIN_ANSWER in result.stdout
    assert_each_turns_reasoning_went_back(demo_upstream, marker)


@pytest.fixture(scope="module")
def signing_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    server = start_proxy(gemini_config(demo_upstream), tmp_path_factory.mktemp("clients-signing"))
    yield server
    stop_proxy(server)


def gemini_steps(demo: DemoUpstream, marker: str) -> list[list[str]]:
    """For each request of the session the Gemini upstream saw, the signature on the first call of
    each of its steps (the demo refused any request where one was missing or not its own)."""
    seen = []
    for record in demo.requests(""):
        if marker in json.dumps(record["body"]) and "contents" in record["body"]:
            steps = [c for c in record["body"]["contents"]
                     if c["role"] == "model" and any("functionCall" in p for p in c["parts"])]
            seen.append([next(p for p in c["parts"] if "functionCall" in p).get("thoughtSignature", "")
                         for c in steps])
    return seen


@pytest.mark.parametrize("client", ["claude", "codex"])
def test_a_dependent_tool_chain_through_a_gemini_upstream_that_enforces_signatures(
        client: str, signing_proxy: ProxyServer, demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    """Three dependent shell calls on a Gemini 3 model: each step's signature must come back on its
    call — through Claude Code's thinking blocks or Codex's encrypted reasoning items — or the
    upstream refuses the next request."""
    marker = f"chain-{uuid.uuid4().hex[:12]}"
    prompt = (f"Run three shell commands, each echoing the previous one's output ({marker}) "
              "[demo:chain=3] [demo:pace=0]")
    if client == "claude":
        result = claude(signing_proxy, tmp_path, "-p", prompt, "--allowedTools", "Bash")
    else:
        result = codex(signing_proxy, tmp_path, prompt)
    assert result.returncode == 0, result.stdout + result.stderr
    assert CHAIN_ANSWER in result.stdout
    steps = gemini_steps(demo_upstream, marker)
    # Each step's own signature came back — not the validator-skip value the proxy would put in its place.
    assert max(len(s) for s in steps) == 3
    assert all(sig and sig != "skip_thought_signature_validator" for s in steps for sig in s), steps


@pytest.fixture(scope="module")
def caching_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    """Two Anthropic upstreams on the demo, chosen by the model: `claude-auto-*` with the default
    `prompt_cache: auto`, `claude-off-*` with `off` (whose requests are Claude Code's as it sent them)."""
    config = base_config(demo_upstream.url)
    config["upstreams"] = [
        {"name": mode, "protocol": "messages", "base_url": demo_upstream.url, "models": {"serve": [f"claude-{mode}-*"]},
         "accounts": [{"id": f"{mode}-0", "api_key": f"sk-ant-cc-{mode}-1"}], **settings}
        for mode, settings in (("auto", {}), ("off", {"prompt_cache": "off"}))]
    server = start_proxy(config, tmp_path_factory.mktemp("clients-caching"))
    yield server
    stop_proxy(server)


def cache_markers(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every `cache_control` of a Messages body, where it sits and what it says."""
    found: list[tuple[str, Any]] = [("top", body["cache_control"])] if "cache_control" in body else []
    system = body.get("system")
    found += [(f"system[{i}]", b["cache_control"]) for i, b in enumerate(system if isinstance(system, list) else [])
              if "cache_control" in b]
    for m, message in enumerate(body["messages"]):
        content = message["content"] if isinstance(message["content"], list) else []
        found += [(f"messages[{m}][{i}]", b["cache_control"]) for i, b in enumerate(content) if "cache_control" in b]
    return found + [(f"tools[{i}]", t["cache_control"]) for i, t in enumerate(body.get("tools", []))
                    if "cache_control" in t]


def test_claude_codes_own_cache_breakpoints_reach_the_upstream_untouched(
        caching_proxy: ProxyServer, demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    """Claude Code marks its own breakpoints (system blocks, the last message): through the default
    `prompt_cache: auto` they arrive exactly where and as Claude Code put them — as through `off`,
    which adds nothing by definition — and no top-level automatic `cache_control` is added. The
    demo caches them per account, so the tool round trip's second turn reads the prompt back."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for mode in ("off", "auto"):
        marker = f"cache-{uuid.uuid4().hex[:12]}"
        home = tmp_path / mode
        home.mkdir()
        result = claude(caching_proxy, home, "--model", f"claude-{mode}-test", "--output-format", "json",
                        "-p", f"Run ls in the current directory ({marker})", "--allowedTools", "Bash")
        assert result.returncode == 0, result.stdout + result.stderr
        usage = json.loads(result.stdout)["usage"]
        seen[mode] = [r["body"] for r in demo_upstream.requests("")
                      if r["path"] == "/v1/messages" and marker in json.dumps(r["body"])]
        assert len(seen[mode]) >= 2, seen[mode]  # the prompt, then the tool's result
        if mode == "auto":
            assert usage["cache_read_input_tokens"] > 0 and usage["cache_creation_input_tokens"] > 0, usage
    for off, auto in zip(seen["off"], seen["auto"], strict=True):
        assert "cache_control" not in auto  # no automatic caching on top of Claude Code's own
        assert cache_markers(auto) == cache_markers(off) and 1 <= len(cache_markers(auto)) <= 4


def codex(proxy: ProxyServer, home: Path, prompt: str) -> subprocess.CompletedProcess[str]:
    codex_home = home / "codex-home"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "demo-model"\nmodel_provider = "llmproxy"\n\n[model_providers.llmproxy]\nname = "llm-proxy"\n'
        f'base_url = "{proxy.url}/v1"\nenv_key = "LLMPROXY_API_KEY"\nwire_api = "responses"\n')
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(codex_home), "LLMPROXY_API_KEY": CLIENT_KEY}
    return subprocess.run([str(Path(BIN or "") / "codex"), "exec", "--skip-git-repo-check", prompt], cwd=home, env=env,
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def test_codex_answers_a_prompt(any_upstream: ProxyServer, tmp_path: Path) -> None:
    result = codex(any_upstream, tmp_path, "Say hello")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("Hello from the llm-proxy demo upstream.")


def test_codex_runs_a_shell_command_round_trip(any_upstream: ProxyServer, tmp_path: Path) -> None:
    result = codex(any_upstream, tmp_path, "Run ls in this directory")
    assert result.returncode == 0, result.stderr
    # The simulated model asked for `echo …` through Codex's shell tool; Codex ran it (stderr shows the
    # command) and sent the output back as function_call_output, which the final answer quotes.
    assert "echo hello from the llm-proxy demo" in result.stderr
    assert "hello from the llm-proxy demo" in result.stdout and "That completes the task." in result.stdout


def test_vercel_ai_sdk_on_all_three_endpoints(proxy: ProxyServer) -> None:
    node_modules = Path(BIN or "").parent
    if not (node_modules / "ai").is_dir():
        pytest.skip(f"the Vercel AI SDK is not installed beside {BIN} (npm install ai @ai-sdk/openai @ai-sdk/anthropic)")
    script = Path(__file__).parent / "js" / "vercel_ai_check.cjs"
    env = {**os.environ, "NODE_PATH": str(node_modules)}
    result = subprocess.run(["node", str(script), proxy.url, CLIENT_KEY], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    runs = {(r["endpoint"], r["scenario"]): r for r in map(json.loads, result.stdout.splitlines())}
    for endpoint in ("chat", "responses", "messages"):
        text, tools = runs[(endpoint, "text")], runs[(endpoint, "tools")]
        assert text["errors"] == [] and tools["errors"] == []
        assert text["text"].startswith("Hello from the llm-proxy demo upstream.") and text["finishReason"] == "stop"
        assert text["usage"]["inputTokens"] > 0 and text["usage"]["outputTokens"] > 0
        assert tools["finishReason"] == "tool-calls"
        assert tools["toolCalls"] == [{"name": "get_weather", "input": {"city": "Paris"}},
                                      {"name": "get_weather", "input": {"city": "Tokyo"}}]
    # @ai-sdk/openai's chat model ignores DeepSeek-style reasoning_content; the other two show it.
    assert runs[("responses", "text")]["reasoning"].startswith("The user wants an answer.")
    assert runs[("messages", "text")]["reasoning"].startswith("The user wants an answer.")
    # An Anthropic client that did not enable thinking gets none, as from the real API.
    assert runs[("messages", "unasked")]["reasoning"] == "" and runs[("messages", "unasked")]["errors"] == []
    assert runs[("messages", "unasked")]["text"].startswith("Hello from the llm-proxy demo upstream.")
    # An answer with no content ends cleanly everywhere; a cited answer carries its source.
    for endpoint in ("chat", "responses", "messages"):
        empty, cite = runs[(endpoint, "empty")], runs[(endpoint, "cite")]
        assert empty["errors"] == [] and empty["text"] == "" and empty["finishReason"] == "stop"
        assert cite["errors"] == [] and cite["text"] == CITED_ANSWER
    # @ai-sdk/openai reads Responses url_citation annotations as sources, @ai-sdk/anthropic reads
    # web-search citations; its chat model has no sources.
    for endpoint in ("responses", "messages"):
        assert runs[(endpoint, "cite")]["sources"] == [{"url": CITED_SOURCE["url"], "title": CITED_SOURCE["title"]}]
