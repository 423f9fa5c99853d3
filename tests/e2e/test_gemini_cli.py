"""gemini-cli against the proxy in front of the simulated upstream, as a new user runs it.

Opt-in, because the client comes from npm: install it once, then point the tests at it:

    npm install --prefix ~/llm-clients @google/gemini-cli
    LLM_PROXY_CLIENTS_BIN=~/llm-clients/node_modules/.bin python -m pytest tests/e2e/test_gemini_cli.py

Written against gemini-cli 0.61.0 (its bundled @google/genai is 1.30.0). What a new user has to do,
found by running it against a recording stub (/work/notes/gemini-cli-findings.md):
- `GOOGLE_GEMINI_BASE_URL` (the root URL: the SDK appends `/v1beta`) and `GEMINI_API_KEY`, sent as
  `x-goog-api-key`; with no settings file the base URL alone selects the "gateway" auth type, which
  `-p` mode refuses ("Invalid auth method selected.", exit 41), so `security.auth.selectedType` is
  `gemini-api-key` in `~/.gemini/settings.json`;
- `GEMINI_CLI_TRUST_WORKSPACE=true` (else exit 55 in a fresh directory), and a `--policy` file that
  allows `run_shell_command` (headless mode treats "ask the user" as "deny");
- usage statistics off (else every request carries an installation id and the CLI reports to
  Google), telemetry and update checks off. Run under strace, it then connects to loopback only.
Each prompt starts with a non-streamed `generateContent` to a flash-lite routing model whose
`responseJsonSchema` uses OpenAPI's uppercase type names; if that answer is not JSON of the schema
the CLI says `[Routing] … failed` on stderr and falls back to its default model. A prompt that
references an image makes it call `countTokens` first; with `--debug` a failed call says
`countTokens API failed` on stderr (otherwise it silently estimates).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.e2e.test_real_clients import CHAIN_ANSWER, assert_each_turns_reasoning_went_back

BIN = os.environ.get("LLM_PROXY_CLIENTS_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="set LLM_PROXY_CLIENTS_BIN to run gemini-cli end to end")

SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "telemetry": {"enabled": False},
    "privacy": {"usageStatisticsEnabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}
# The policy-engine format of gemini-cli's docs/reference/policy-engine.md; a user policy (tier 4).
POLICY = '[[rule]]\ntoolName = "run_shell_command"\ndecision = "allow"\npriority = 100\n'
SKIP_SIGNATURE = "skip_thought_signature_validator"  # what gemini-cli puts on a first call that has none
# A 1x1 PNG: a prompt naming it (`@pic.png`) makes gemini-cli inline it and count tokens first.
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63fc"
                    "cfc0500f000485018084a98c210000000049454e44ae426082")


@pytest.fixture(scope="module", params=["chat_completions", "messages", "responses", "gemini"])
def any_upstream(request: pytest.FixtureRequest, demo_upstream: DemoUpstream,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    """The proxy in front of the demo speaking each upstream protocol in turn (the demo's Gemini
    face answers under `/v1beta` below its root or its `/v1`, so the one base URL serves all four)."""
    config = base_config(demo_upstream.url)
    config["upstreams"][0]["protocol"] = request.param
    server = start_proxy(config, tmp_path_factory.mktemp(f"gemini-cli-{request.param}"))
    yield server
    stop_proxy(server)


@pytest.fixture(scope="module")
def default_proxy(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    """The proxy with an OpenAI-compatible upstream and nothing configured about reasoning."""
    server = start_proxy(base_config(demo_upstream.url), tmp_path_factory.mktemp("gemini-cli-default"))
    yield server
    stop_proxy(server)


def gemini(proxy: ProxyServer, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """gemini-cli in headless mode from a scratch home, its workspace `home/work`, shell tool allowed."""
    (home / ".gemini").mkdir(exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    (home / "policy.toml").write_text(POLICY)
    work = home / "work"
    work.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home), "TERM": "dumb",
        "GOOGLE_GEMINI_BASE_URL": proxy.url, "GEMINI_API_KEY": CLIENT_KEY, "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_TELEMETRY_ENABLED": "false",
    }
    return subprocess.run([str(Path(BIN or "") / "gemini"), "--policy", str(home / "policy.toml"), *args], cwd=work,
                          env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def assert_routed(result: subprocess.CompletedProcess[str]) -> None:
    """The routing call was answered with JSON of its schema (else gemini-cli says so and falls back)."""
    assert "[Routing]" not in result.stderr, result.stderr


def test_gemini_cli_answers_a_prompt(any_upstream: ProxyServer, tmp_path: Path) -> None:
    result = gemini(any_upstream, tmp_path, "-p", "Say hello")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Hello from the llm-proxy demo upstream." in result.stdout
    assert_routed(result)


def test_gemini_cli_counts_tokens_for_an_image(any_upstream: ProxyServer, tmp_path: Path) -> None:
    """An image in the prompt: gemini-cli asks `countTokens` (model `gemini-3.1-pro-preview`, body
    `{contents}` with the image as `inlineData`) before it sends the prompt."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "pic.png").write_bytes(PNG)
    result = gemini(any_upstream, tmp_path, "--debug", "-p", "Describe @pic.png")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "countTokens API failed" not in result.stderr, result.stderr
    assert "Hello from the llm-proxy demo upstream." in result.stdout


def chain_prompt(marker: str, *extra: str) -> str:
    # gemini-cli's shell tool is `run_shell_command`, which is not among the demo's shell-like names.
    return ("Run three shell commands, each echoing the previous one's output "
            f"({marker}) [demo:chain=3] [demo:tool=run_shell_command] [demo:pace=0] " + " ".join(extra)).strip()


def gemini_turns(demo: DemoUpstream, marker: str) -> list[list[dict[str, Any]]]:
    """The `contents` of every request of the session that reached the demo's Gemini face."""
    return [r["body"]["contents"] for r in demo.requests("")
            if isinstance(r.get("body"), dict) and "contents" in r["body"] and marker in json.dumps(r["body"])]


def test_gemini_cli_runs_a_dependent_tool_chain(any_upstream: ProxyServer, demo_upstream: DemoUpstream,
                                                tmp_path: Path) -> None:
    """Three calls of the shell tool, each echoing the previous output, then the answer quoting all
    three. gemini-cli sends back only the `functionCall` parts of each model turn (thought parts are
    dropped) with their `id`s and `thoughtSignature`s, and `functionResponse` parts with the same
    `id`, `response: {"output": "<untrusted_context>\\nOutput: …\\nProcess Group PGID: N\\n</untrusted_context>"}`.
    On the Gemini upstream the model is a `gemini-3*` one, so the demo enforces signatures as
    Gemini 3 does: each step's first call must carry the signature it was given."""
    marker = f"chain-{uuid.uuid4().hex[:12]}"
    result = gemini(any_upstream, tmp_path, "-p", chain_prompt(marker))
    assert result.returncode == 0, result.stdout + result.stderr
    assert CHAIN_ANSWER in result.stdout
    assert_routed(result)
    turns = gemini_turns(demo_upstream, marker)
    if turns:  # the Gemini upstream: the demo's signatures came back, not gemini-cli's stand-in
        firsts = [next((p for p in c.get("parts", []) if "functionCall" in p), None)
                  for contents in turns for c in contents if c.get("role") == "model"]
        calls = [p for p in firsts if p is not None]
        assert calls and all(p.get("thoughtSignature") not in (None, "", SKIP_SIGNATURE) for p in calls), calls
        assert max(len(contents) for contents in turns) >= 7  # the prompt, then three calls and their results


def test_gemini_cli_runs_a_dependent_tool_chain_on_a_strict_reasoning_upstream(
        default_proxy: ProxyServer, demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    """A DeepSeek-style upstream refuses assistant tool-call messages without their reasoning.
    gemini-cli drops thought parts from its history and keeps a `thoughtSignature` only on the parts
    it keeps (a signature on a thought part is lost, and the first call of a turn that has none gets
    `skip_thought_signature_validator`), so the proxy must carry each turn's reasoning in the
    signature on that turn's first `functionCall` part and restore it as `reasoning_content`."""
    marker = f"chain-{uuid.uuid4().hex[:12]}"
    result = gemini(default_proxy, tmp_path, "-p", chain_prompt(marker, "[demo:require-reasoning]"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert CHAIN_ANSWER in result.stdout
    assert_each_turns_reasoning_went_back(demo_upstream, marker)


# gemini-cli 0.61.0's routing request as captured (its system prompt shortened): the schema is an
# OpenAPI-subset one in `responseJsonSchema`, uppercase type names and all.
ROUTING_REQUEST = {
    "contents": [{"role": "user", "parts": [{"text": "<session_context>\nThis is the Gemini CLI.\n</session_context>"}]},
                 {"role": "user", "parts": [{"text": "say hi"}]}],
    "systemInstruction": {"parts": [{"text": "You are a specialized Task Routing AI. Respond only in JSON."}]},
    "generationConfig": {
        "temperature": 1, "topP": 0.95, "topK": 64, "responseMimeType": "application/json",
        "responseJsonSchema": {
            "type": "OBJECT",
            "properties": {
                "complexity_reasoning": {"type": "STRING", "description": "Brief explanation for the score."},
                "complexity_score": {"type": "INTEGER", "description": "Complexity score from 1-100."}},
            "required": ["complexity_reasoning", "complexity_score"]},
        "thinkingConfig": {"includeThoughts": True, "thinkingLevel": "HIGH"}},
}


@pytest.mark.parametrize("colon", [":", "%3A"])
def test_the_routing_request_gets_json_of_its_schema(any_upstream: ProxyServer, colon: str) -> None:
    """What gemini-cli's classifier parses: the non-thought text of the answer is JSON with a string
    `complexity_reasoning` and an integer `complexity_score` in 1..100 (zod-checked by the CLI)."""
    request = urllib.request.Request(
        f"{any_upstream.url}/v1beta/models/gemini-3.5-flash-lite{colon}generateContent",
        data=json.dumps(ROUTING_REQUEST).encode(), method="POST",
        headers={"Content-Type": "application/json", "x-goog-api-key": CLIENT_KEY,
                 "x-goog-api-client": "google-genai-sdk/1.30.0 gl-node/v20.20.2"})
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.loads(response.read())
    parts = body["candidates"][0]["content"]["parts"]
    answer = json.loads("".join(p.get("text", "") for p in parts if not p.get("thought")))
    assert isinstance(answer["complexity_reasoning"], str)
    assert isinstance(answer["complexity_score"], int) and 1 <= answer["complexity_score"] <= 100
