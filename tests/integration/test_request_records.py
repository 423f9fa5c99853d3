"""Every completion request ends in exactly one record handed to the hooks (proxy.ops): where it
went, what it cost, how it ended — for a whole answer, a stream, a refused request and a failed one.
The app runs in-process in front of the live demo upstream, with a hook that keeps what it is told.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from proxy.blueprints.state import app_state
from proxy.config import parse
from proxy.ops.hooks import Hooks
from proxy.ops.records import AttemptRecord, RequestRecord
from proxy.serving.app import create_app
from tests.conftest import CLIENT_KEY, DemoUpstream, base_config
from tests.state_files import migrated


class Kept(Hooks):
    def __init__(self) -> None:
        self.attempts: list[AttemptRecord] = []
        self.done: list[RequestRecord] = []
        self.open_streams = 0

    def attempt(self, record: AttemptRecord) -> None:
        self.attempts.append(record)

    def stream_opened(self, record: RequestRecord) -> None:
        self.open_streams += 1

    def stream_closed(self, record: RequestRecord) -> None:
        self.open_streams -= 1

    def request_done(self, record: RequestRecord) -> None:
        self.done.append(record)


@pytest.fixture()
def app_and_hook(demo_upstream: DemoUpstream, tmp_path: Path) -> Iterator[tuple[FlaskClient, Kept]]:
    config = base_config(demo_upstream.url, state_path=migrated(tmp_path / "state.db"))
    app = create_app(parse(config), start_background=False)
    kept = Kept()
    app_state(app).hooks.add(kept)
    yield app.test_client(), kept


def post(client: FlaskClient, body: dict[str, Any], path: str = "/v1/chat/completions") -> Any:
    return client.post(path, json=body, headers={"Authorization": f"Bearer {CLIENT_KEY}"})


def test_a_whole_answer_is_recorded_once_with_its_usage(app_and_hook: tuple[FlaskClient, Kept]) -> None:
    client, kept = app_and_hook
    resp = post(client, {"model": "demo-model", "messages": [{"role": "user", "content": "hi [demo:words=3]"}]})
    usage = resp.get_json()["usage"]
    (record,) = kept.done
    assert (record.client_protocol, record.model, record.stream, record.status, record.outcome) == (
        "chat_completions", "demo-model", False, 200, "ok")
    assert (record.upstream, record.account, record.upstream_model, record.attempts) == ("main", "acct-1",
                                                                                           "demo-model", 1)
    assert record.usage is not None and (record.usage.input_tokens, record.usage.output_tokens) == (
        usage["prompt_tokens"], usage["completion_tokens"])
    assert record.client_key.startswith("key-") and CLIENT_KEY not in record.client_key
    assert record.duration_s is not None and record.first_byte_s is not None
    (attempt,) = kept.attempts
    assert (attempt.upstream, attempt.status, attempt.klass, attempt.action) == ("main", 200, "ok", "return")


def test_a_stream_is_recorded_when_it_ends(app_and_hook: tuple[FlaskClient, Kept]) -> None:
    client, kept = app_and_hook
    resp = post(client, {"model": "demo-model", "stream": True, "stream_options": {"include_usage": True},
                         "messages": [{"role": "user", "content": "hi [demo:words=3] [demo:pace=0]"}]})
    assert kept.open_streams == 1 and kept.done == []  # the answer is still to be read
    frames = [f for f in resp.get_data().split(b"\n\n") if f.startswith(b"data: {")]
    resp.close()  # as the WSGI server does once the body is sent
    usage = json.loads(frames[-1][6:])["usage"]
    (record,) = kept.done
    assert kept.open_streams == 0
    assert (record.stream, record.status, record.outcome) == (True, 200, "ok")
    assert record.usage is not None and record.usage.output_tokens == usage["completion_tokens"]
    assert record.first_byte_s is not None and record.duration_s is not None
    assert record.first_byte_s <= record.duration_s


def test_a_refused_request_is_recorded_with_its_error(app_and_hook: tuple[FlaskClient, Kept]) -> None:
    client, kept = app_and_hook
    assert post(client, {"model": "demo-model"}).status_code == 400  # no messages
    assert post(client, {"model": "demo-model", "messages": [{"role": "user", "content": "[demo:status=500]"}]}
                ).status_code == 500
    assert [(r.status, r.outcome, r.model) for r in kept.done] == [(400, "invalid_request", ""),
                                                                   (500, "api_error", "demo-model")]


def test_a_streams_record_is_closed_before_the_end_of_its_response_goes_out(
        app_and_hook: tuple[FlaskClient, Kept]) -> None:
    """The server ends a response (its last chunk) only after the body is exhausted: a record closed
    then is in the usage figures before a client that has the whole answer can ask for them."""
    client, kept = app_and_hook
    resp = post(client, {"model": "demo-model", "stream": True, "stream_options": {"include_usage": True},
                         "messages": [{"role": "user", "content": "hi [demo:words=2] [demo:pace=0]"}]})
    body = resp.get_data()  # every frame, as gunicorn writes them before the terminating chunk
    assert body.endswith(b"data: [DONE]\n\n")
    (record,) = kept.done  # already: not left for close()
    assert (record.outcome, kept.open_streams) == ("ok", 0) and record.usage is not None
    resp.close()
    assert len(kept.done) == 1  # and close() does not report it again
