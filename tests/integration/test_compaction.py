"""Compaction on every upstream protocol, as Codex asks for it: v1 (`POST /v1/responses/compact`,
`{"output": [...]}`) and v2 (a `/v1/responses` stream whose last input item is
`compaction_trigger`, answered with exactly one `compaction` item then `response.completed`).
A Responses upstream compacts itself (passed through); for Chat and Messages upstreams the proxy
asks the same model for a summary and seals it; a sealed item that comes back is expanded into the
summary the model sees, and one that was altered is refused before any upstream is asked."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from websockets.sync.client import connect

from proxy.demo.scenarios import ANSWER
from proxy.protocols.responses.compaction import SEALED_PREFIX, SUMMARY_HEADER, SUMMARY_INSTRUCTION
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.integration.upstreams import proxy_speaking

PROTOCOLS = ("chat_completions", "messages", "responses")
SHELL_TOOL = {"type": "function", "name": "shell", "description": "run a command", "strict": False,
              "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
HISTORY: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the failing test"}]},
    {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"command\": \"pytest\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "1 failed: test_parse"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The parser is wrong."}]},
]
TRIGGER = {"type": "compaction_trigger"}


@pytest.fixture(scope="module", params=PROTOCOLS)
def upstream(request: pytest.FixtureRequest, demo_upstream: DemoUpstream,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ProxyServer]]:
    with proxy_speaking(request.param, demo_upstream, tmp_path_factory.mktemp(f"compaction-{request.param}")) as server:
        yield request.param, server


def post(proxy: ProxyServer, path: str, body: dict[str, Any], rid: str) -> requests.Response:
    return requests.post(f"{proxy.url}{path}", json=body, timeout=30,
                         headers={"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-Id": rid})


def sse(proxy: ProxyServer, body: dict[str, Any], rid: str) -> list[dict[str, Any]]:
    resp = post(proxy, "/v1/responses", {**body, "stream": True}, rid)
    assert resp.status_code == 200, resp.text
    return [json.loads(line[6:]) for line in resp.text.splitlines() if line.startswith("data: ")]


def upstream_text(body: dict[str, Any]) -> str:
    """Everything the upstream was sent, as text, whichever protocol it speaks."""
    return json.dumps(body, ensure_ascii=False)


def last_user_text(protocol: str, body: dict[str, Any]) -> str:
    if protocol == "chat_completions":
        content = body["messages"][-1]["content"]
        return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    if protocol == "messages":
        content = body["messages"][-1]["content"]
        return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    raise AssertionError(protocol)


def test_v2_streams_exactly_one_compaction_item_then_completed(upstream: tuple[str, ProxyServer],
                                                             demo_upstream: DemoUpstream) -> None:
    protocol, proxy = upstream
    rid = uuid.uuid4().hex
    events = sse(proxy, {"model": "demo-model", "input": [*HISTORY, TRIGGER], "tools": [SHELL_TOOL], "store": False,
                         "instructions": "You are Codex."}, rid)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [item["type"] for item in done] == ["compaction"]
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["output"] == done
    assert events[0]["type"] == "response.created"
    (sent,) = demo_upstream.requests(rid)
    if protocol == "responses":  # the upstream compacts itself: the trigger went up, its item came back
        assert sent["body"]["input"][-1] == TRIGGER
        assert done[0]["encrypted_content"].startswith("demo-compaction.")
        # The proxy relayed the compaction item as it came: its log must not say it skipped it.
        said = [line for line in proxy.log().splitlines() if rid in line]
        assert any("stream end" in line for line in said)
        assert not [line for line in said if "skipping" in line], said
        return
    assert done[0]["encrypted_content"].startswith(SEALED_PREFIX)
    assert ANSWER not in done[0]["encrypted_content"]  # sealed, not readable
    assert last_user_text(protocol, sent["body"]) == SUMMARY_INSTRUCTION  # the same model asked for a summary
    assert "The parser is wrong." in upstream_text(sent["body"])  # over the whole conversation
    # with the tools the history uses still declared, and told not to call them
    assert sent["body"]["tool_choice"] in ("none", {"type": "none"}) and sent["body"]["tools"]
    assert events[-1]["response"]["usage"]["output_tokens"] > 0


def test_v1_answers_the_output_with_the_users_messages_and_one_compaction_item(
        upstream: tuple[str, ProxyServer], demo_upstream: DemoUpstream) -> None:
    protocol, proxy = upstream
    rid = uuid.uuid4().hex
    resp = post(proxy, "/v1/responses/compact", {"model": "demo-model", "input": HISTORY, "tools": [SHELL_TOOL],
                                                 "instructions": "You are Codex.", "parallel_tool_calls": False}, rid)
    assert resp.status_code == 200, resp.text
    output = resp.json()["output"]
    assert [i.get("role") or i["type"] for i in output] == ["user", "compaction"]
    assert output[0]["content"] == HISTORY[0]["content"]
    (sent,) = demo_upstream.requests(rid)
    if protocol == "responses":
        assert sent["path"].endswith("/responses/compact") and sent["body"]["input"] == HISTORY
        assert output[1]["encrypted_content"].startswith("demo-compaction.")
    else:
        assert output[1]["encrypted_content"].startswith(SEALED_PREFIX)
        assert last_user_text(protocol, sent["body"]) == SUMMARY_INSTRUCTION


def test_a_compaction_item_that_comes_back_is_what_its_maker_reads(upstream: tuple[str, ProxyServer],
                                                                    demo_upstream: DemoUpstream) -> None:
    protocol, proxy = upstream
    compact_rid = uuid.uuid4().hex
    compacted = post(proxy, "/v1/responses/compact", {"model": "demo-model", "input": HISTORY},
                     compact_rid).json()["output"]
    if protocol != "responses":  # no tools in the request: no tool_choice either (OpenAI refuses one alone)
        assert "tool_choice" not in demo_upstream.requests(compact_rid)[0]["body"]
    rid = uuid.uuid4().hex
    follow_up = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on [demo:words=3]"}]}
    resp = post(proxy, "/v1/responses", {"model": "demo-model", "input": [*compacted, follow_up]}, rid)
    assert resp.status_code == 200, resp.text
    (sent,) = demo_upstream.requests(rid)
    text = upstream_text(sent["body"])
    if protocol == "responses":
        assert sent["body"]["input"][1]["encrypted_content"] == compacted[1]["encrypted_content"]
    else:
        # The proxy's blob never reaches an upstream: the summary does, as a message.
        assert SEALED_PREFIX not in text
        assert json.dumps(SUMMARY_HEADER + ANSWER)[1:-1] in text


def test_an_altered_compaction_item_is_refused_before_any_upstream(upstream: tuple[str, ProxyServer],
                                                                   demo_upstream: DemoUpstream) -> None:
    _, proxy = upstream
    compacted = post(proxy, "/v1/responses/compact", {"model": "demo-model", "input": HISTORY},
                     uuid.uuid4().hex).json()["output"]
    sealed = {"type": "compaction", "encrypted_content": SEALED_PREFIX + "A" * 80}  # not one of ours
    if compacted[1]["encrypted_content"].startswith(SEALED_PREFIX):
        blob, middle = compacted[1]["encrypted_content"], len(compacted[1]["encrypted_content"]) // 2
        sealed["encrypted_content"] = blob[:middle] + ("A" if blob[middle] != "A" else "B") + blob[middle + 1:]
    for path in ("/v1/responses", "/v1/responses/compact"):
        rid = uuid.uuid4().hex
        resp = post(proxy, path, {"model": "demo-model", "input": [HISTORY[0], sealed]}, rid)
        assert resp.status_code == 400
        error = resp.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == "input[1].encrypted_content"
        assert "altered" in error["message"]
        assert demo_upstream.requests(rid) == []


def test_v2_over_a_websocket(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    server = start_proxy(base_config(demo_upstream.url), tmp_path)
    try:
        with connect(server.url.replace("http://", "ws://") + "/v1/responses", open_timeout=10,
                     additional_headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as ws:
            ws.send(json.dumps({"type": "response.create", "model": "demo-model", "store": False,
                                "input": [*HISTORY, TRIGGER]}))
            events = []
            while not events or events[-1]["type"] not in ("response.completed", "response.failed", "error"):
                events.append(json.loads(ws.recv(timeout=20)))
    finally:
        stop_proxy(server)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert events[-1]["type"] == "response.completed" and [i["type"] for i in done] == ["compaction"]
    assert done[0]["encrypted_content"].startswith(SEALED_PREFIX)
