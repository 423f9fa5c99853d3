"""Compaction's pure parts: sealing and opening summaries, rewriting input items for each upstream
protocol, the compaction stream's shape, and the config key and its generated file."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from proxy.config import ConfigError, parse
from proxy.conversations.compaction_key import compaction_secret
from proxy.errors import ProxyError
from proxy.ir.events import BlockStart, BlockStop, Delta, Finish, Start, UsageUpdate
from proxy.ir.request import ReasoningPart, TextPart
from proxy.ir.response import Usage
from proxy.protocols.responses.compaction import (
    SEALED_PREFIX,
    SUMMARY_HEADER,
    SUMMARY_INSTRUCTION,
    Sealer,
    compaction_item,
    for_upstream,
)
from proxy.protocols.responses.compaction_stream import CompactionStreamEncoder
from proxy.protocols.sse import SSEParser, loads

SECRET = "s" * 40
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


def test_a_sealed_summary_opens_only_unaltered_and_under_its_key() -> None:
    sealer = Sealer(SECRET)
    sealed = sealer.seal("the summary", "demo-model")
    assert sealed.startswith(SEALED_PREFIX) and "summary" not in sealed
    assert sealer.open(sealed, "input[0].encrypted_content") == "the summary"
    middle = len(sealed) // 2  # a character that is all data (the last ones may be padding bits)
    flipped = sealed[:middle] + ("A" if sealed[middle] != "A" else "B") + sealed[middle + 1:]
    for bad in (flipped, sealed[:-10], SEALED_PREFIX + "!!", Sealer("t" * 40).seal("x", "m")):
        with pytest.raises(ProxyError) as refused:
            sealer.open(bad, "input[3].encrypted_content")
        assert refused.value.info.status == 400 and refused.value.info.param == "input[3].encrypted_content"


def test_items_for_each_upstream_protocol() -> None:
    sealer = Sealer(SECRET)
    ours = compaction_item(sealer, "what happened", "m")
    theirs = {"type": "compaction", "encrypted_content": "gAAAA-upstream-own"}
    trigger = {"type": "compaction_trigger"}
    summary = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": SUMMARY_HEADER +
                                                                "what happened"}]}
    instruction = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": SUMMARY_INSTRUCTION}]}
    items = [USER, ours, theirs, trigger]
    # A Responses upstream compacts itself and keeps its own items; ours is expanded for any upstream.
    assert for_upstream(items, "responses", sealer, summarise=False) == [USER, summary, theirs, trigger]
    assert for_upstream(items, "chat_completions", sealer, summarise=False) == [USER, summary, instruction]
    assert for_upstream([USER], "messages", sealer, summarise=True) == [USER, instruction]
    assert for_upstream([USER], "responses", sealer, summarise=True) == [USER]


def frames_of(encoder: CompactionStreamEncoder, events: list) -> list[dict]:
    raw = b"".join(frame for ev in events for frame in encoder.encode(ev))
    return [loads(e.data) for e in SSEParser().feed(raw)]


def test_the_compaction_stream_has_one_item_and_no_reasoning_or_text_deltas() -> None:
    sealer = Sealer(SECRET)
    encoder = CompactionStreamEncoder({"model": "m"}, "m", sealer)
    events = frames_of(encoder, [Start("x", "m", 0), BlockStart(ReasoningPart(), 0), Delta("thinking", 0),
                                 BlockStop(0), BlockStart(TextPart(""), 1), Delta("the ", 1), Delta("summary", 1),
                                 BlockStop(1), UsageUpdate(Usage(input_tokens=10, output_tokens=4)), Finish("stop")])
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.output_item.added",
                                           "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(5))
    item = events[-1]["response"]["output"][0]
    assert item["type"] == "compaction" and sealer.open(item["encrypted_content"], "x") == "the summary"
    assert events[-1]["response"]["usage"]["output_tokens"] == 4 and encoder.final == events[-1]["response"]


def test_an_empty_summary_fails_the_response() -> None:
    encoder = CompactionStreamEncoder({"model": "m"}, "m", Sealer(SECRET))
    events = frames_of(encoder, [Start("x", "m", 0), Finish("stop")])
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]


def config(tmp_path: Path, **extra: object) -> object:
    return parse({"client_keys": ["k"], "state_path": str(tmp_path / "state.db"),
                  "upstreams": [{"name": "a", "protocol": "chat_completions", "base_url": "http://127.0.0.1:1",
                                 "accounts": [{"id": "a", "api_key": "k"}]}], **extra})


def test_the_key_from_config_must_be_long(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"compaction\.key"):
        config(tmp_path, compaction={"key": "short"})
    assert compaction_secret(config(tmp_path, compaction={"key": SECRET})) == SECRET  # type: ignore[arg-type]


def test_a_generated_key_is_written_once_and_shared(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    keys: list[str] = []
    workers = [threading.Thread(target=lambda: keys.append(compaction_secret(cfg))) for _ in range(8)]  # type: ignore[arg-type]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(set(keys)) == 1 and len(keys[0]) >= 32
    key_file = tmp_path / "compaction.key"
    assert key_file.read_text().strip() == keys[0] and key_file.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["compaction.key"]  # no temporary file left behind
