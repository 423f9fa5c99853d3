"""Named client keys on a live server, as the real SDKs see them: a key restricted to some models
gets a 403 in its protocol's words for any other model (and the upstream receives nothing), a glob
lets the models it names through, a disabled key gets 401, plain-string keys work as before, and
the log names keys by their names — never the keys."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from proxy.blueprints.auth import key_name
from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.integration.test_pool_shared_state import eventually

ALICE = "sk-alice-0123456789"  # demo-* models only
CI = "sk-ci-bot-0123456789"  # gpt-4o* models only
GONE = "sk-gone-0123456789"  # disabled
HI = [{"role": "user", "content": "hi [demo:pace=0] [demo:words=2]"}]


@pytest.fixture(scope="module")
def keyed(demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyServer]:
    config = base_config(demo_upstream.url, client_keys=[
        CLIENT_KEY,
        {"name": "alice", "key": ALICE, "models": ["demo-*"]},
        {"name": "ci-bot", "key": CI, "models": ["gpt-4o*"]},
        {"name": "gone", "key": GONE, "disabled": True},
    ])
    server = start_proxy(config, Path(tmp_path_factory.mktemp("keys")))
    yield server
    stop_proxy(server)


def oa(proxy: ProxyServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0, timeout=20)


def an(proxy: ProxyServer, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0, timeout=20)


def rid() -> str:
    return "keys-" + uuid.uuid4().hex


def test_a_model_the_key_may_not_use_is_refused_in_each_protocols_shape(
        keyed: ProxyServer, demo_upstream: DemoUpstream) -> None:
    refused: list[str] = []

    def chat(request_id: str) -> Any:
        return oa(keyed, CI).chat.completions.create(model="demo-model", messages=HI,  # type: ignore[arg-type]
                                                     extra_headers={"x-request-id": request_id})

    def responses(request_id: str) -> Any:
        return oa(keyed, CI).responses.create(model="demo-model", input="hi [demo:pace=0]", stream=True,
                                              extra_headers={"x-request-id": request_id})

    for call in (chat, responses):
        request_id = rid()
        with pytest.raises(openai.PermissionDeniedError) as caught:
            call(request_id)
        error = caught.value.body
        assert isinstance(error, dict)
        assert (error["code"], error["type"], error["param"]) == ("model_not_allowed", "permission_error", "model")
        assert "'demo-model'" in error["message"] and "gpt-4o*" in error["message"] and CI not in error["message"]
        refused.append(request_id)

    for stream in (False, True):
        request_id = rid()
        with pytest.raises(anthropic.PermissionDeniedError) as denied:
            an(keyed, CI).messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=HI,  # type: ignore[arg-type]
                                          stream=stream, extra_headers={"x-request-id": request_id})
        body = denied.value.body
        assert isinstance(body, dict) and body["type"] == "error"
        assert body["error"]["type"] == "permission_error" and "'claude-sonnet-4-6'" in body["error"]["message"]
        refused.append(request_id)

    request_id = rid()
    with pytest.raises(anthropic.PermissionDeniedError):  # counting tokens names a model too
        an(keyed, CI).messages.count_tokens(model="claude-sonnet-4-6", messages=HI,  # type: ignore[arg-type]
                                            extra_headers={"x-request-id": request_id})
    refused.append(request_id)
    assert all(demo_upstream.requests(r) == [] for r in refused)  # nothing reached the upstream


def test_a_glob_lets_the_models_it_names_through(keyed: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    answer = oa(keyed, CI).chat.completions.create(model="gpt-4o-mini", messages=HI,  # type: ignore[arg-type]
                                                   extra_headers={"x-request-id": request_id})
    assert answer.choices[0].message.content
    assert [r["body"]["model"] for r in demo_upstream.requests(request_id)] == ["gpt-4o-mini"]
    message = an(keyed, ALICE).messages.create(model="demo-model", max_tokens=50, messages=HI)  # type: ignore[arg-type]
    assert message.content[0].type == "text"
    assert an(keyed, ALICE).messages.count_tokens(model="demo-model", messages=HI).input_tokens > 0  # type: ignore[arg-type]
    # The model list shows each key the models it may use.
    assert {m.id for m in oa(keyed, CI).models.list()} == {"gpt-4o-mini"}
    assert {m.id for m in oa(keyed, ALICE).models.list()} == {"demo-model", "demo-reasoner"}
    assert "claude-sonnet-4-6" in {m.id for m in oa(keyed, CLIENT_KEY).models.list()}
    with pytest.raises(openai.PermissionDeniedError):
        oa(keyed, CI).models.retrieve("demo-model")


def test_a_disabled_key_gets_401_and_plain_keys_still_work(keyed: ProxyServer, demo_upstream: DemoUpstream) -> None:
    request_id = rid()
    with pytest.raises(openai.AuthenticationError) as caught:
        oa(keyed, GONE).chat.completions.create(model="demo-model", messages=HI,  # type: ignore[arg-type]
                                                extra_headers={"x-request-id": request_id})
    assert isinstance(caught.value.body, dict) and "'gone' is disabled" in caught.value.body["message"]
    with pytest.raises(anthropic.AuthenticationError) as refused:
        an(keyed, GONE).messages.create(model="demo-model", max_tokens=50, messages=HI)  # type: ignore[arg-type]
    assert isinstance(refused.value.body, dict) and refused.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        oa(keyed, GONE).models.list()
    assert demo_upstream.requests(request_id) == []
    answer = oa(keyed, CLIENT_KEY).chat.completions.create(model="claude-sonnet-4-6", messages=HI)  # type: ignore[arg-type]
    assert answer.choices[0].message.content


def test_the_log_names_keys_by_name_never_by_key(keyed: ProxyServer) -> None:
    ids = {name: rid() for name in ("alice", "ci-bot", "gone", "plain")}
    oa(keyed, ALICE).chat.completions.create(model="demo-model", messages=HI,  # type: ignore[arg-type]
                                             extra_headers={"x-request-id": ids["alice"]})
    with pytest.raises(openai.PermissionDeniedError):
        oa(keyed, CI).chat.completions.create(model="demo-model", messages=HI,  # type: ignore[arg-type]
                                              extra_headers={"x-request-id": ids["ci-bot"]})
    with pytest.raises(openai.AuthenticationError):
        oa(keyed, GONE).chat.completions.create(model="demo-model", messages=HI,  # type: ignore[arg-type]
                                                extra_headers={"x-request-id": ids["gone"]})
    oa(keyed, CLIENT_KEY).chat.completions.create(model="demo-model", messages=HI,  # type: ignore[arg-type]
                                                  extra_headers={"x-request-id": ids["plain"]})
    expected = {"alice": "alice", "ci-bot": "ci-bot", "gone": "gone", "plain": key_name(CLIENT_KEY)}

    def access_lines() -> dict[str, str]:  # gunicorn writes the access line once the response is sent
        lines = keyed.log().splitlines()
        return {who: line for who, request_id in ids.items() for line in lines
                if f" rid={request_id} " in line and line.startswith("127.0.0.1 ")}

    assert eventually(lambda: len(access_lines()) == len(ids))
    for who, line in access_lines().items():
        assert f" key={expected[who]} rid=" in line, line
    log = keyed.log()
    assert all(secret not in log for secret in (ALICE, CI, GONE, CLIENT_KEY))
