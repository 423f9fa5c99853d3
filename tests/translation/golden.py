"""Golden-transcript harness: replay a recorded upstream stream through a relay or decoder and
compare with the expected client output, whole, byte by byte and cut in two (`splits`).

`UPDATE_GOLDEN=1 pytest tests/translation` rewrites the goldens; review the diff before committing.
Ids and timestamps the proxy mints are normalised so goldens are stable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from proxy.ir.events import Event
from proxy.ir.fold import check_well_formed
from proxy.protocols.sse import SSEParser

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "sse"
GOLDEN = ROOT / "golden"
T = TypeVar("T")

_MINTED = [
    (re.compile(r"chatcmpl-[0-9a-f]{24}"), "chatcmpl-<minted>"),
    (re.compile(r"call_[0-9a-f]{24}"), "call_<minted>"),
    (re.compile(r"msg_[0-9A-Za-z]{24,32}"), "msg_<minted>"),
    (re.compile(r"(resp|rs|fc|ctc)_[0-9a-f]{32}"), r"\1_<minted>"),
    (re.compile(r'"(created|created_at|completed_at)":\s?1[789]\d{8}'), r'"\1":<now>'),
]


def fixture_names(protocol: str) -> list[str]:
    return sorted(p.stem for p in (FIXTURES / protocol).glob("*.sse"))


def fixture(protocol: str, name: str) -> bytes:
    return (FIXTURES / protocol / f"{name}.sse").read_bytes()


def normalise(text: str) -> str:
    for pattern, replacement in _MINTED:
        text = pattern.sub(replacement, text)
    return text


MID_LINE_STRIDE = 32  # besides the line ends, a cut in two every this many bytes


def splits(data: bytes) -> Iterable[list[bytes]]:
    """The stream whole, byte by byte, and cut in two at each line's end and a byte either side of
    it (a CR LF cut between its two bytes), and every `MID_LINE_STRIDE` bytes in between.

    What follows the SSE parser sees only whole events, so what a cut can change for it is which
    events arrive in the first read and which in the second: a cut anywhere in a line groups them as
    the cut at that line's start does, and the cuts at every line's end give every grouping there
    is. The parser itself sees every offset here in the byte-by-byte run, and every single cut in
    tests/unit/test_sse.py (a stream of every line ending); the mid-line cuts keep some cuts inside
    a field, a JSON value and a multi-byte character in these runs too. (Every offset, as before,
    cost 19 times the reads for no grouping more — a quarter of the suite's time.)"""
    yield [data]
    yield [data[i:i + 1] for i in range(len(data))]
    cuts = set(range(1, len(data), MID_LINE_STRIDE))
    for end, byte in enumerate(data):
        if byte in b"\r\n":
            cuts.update(cut for cut in (end, end + 1, end + 2) if 0 < cut < len(data))
    for cut in sorted(cuts):
        yield [data[:cut], data[cut:]]


def replay(pieces: list[bytes], feed: Callable[[Any], list[T]], close: Callable[[], list[T]]) -> list[T]:
    """Feed the pieces through the SSE parser into `feed`, then end the stream with `close`."""
    parser = SSEParser()
    out: list[T] = []
    for piece in pieces:
        for ev in parser.feed(piece):
            out += feed(ev)
    for ev in parser.flush():
        out += feed(ev)
    return out + close()


def run_frames(pieces: list[bytes], feed: Callable[[Any], list[bytes]], close: Callable[[], list[bytes]]) -> bytes:
    return b"".join(replay(pieces, feed, close))


def run_events(pieces: list[bytes], feed: Callable[[Any], list[Event]], close: Callable[[], list[Event]]) -> list[Event]:
    return replay(pieces, feed, close)


def events_json(events: list[Event]) -> str:
    def encode(ev: Event) -> dict[str, Any]:
        fields = dataclasses.asdict(ev)
        part = getattr(ev, "part", None)
        if part is not None:
            fields["part"] = {"type": type(part).__name__, **dataclasses.asdict(part)}
        return {"event": type(ev).__name__, **fields}
    return "\n".join(json.dumps(encode(ev), ensure_ascii=False, sort_keys=True) for ev in events) + "\n"


def check_golden(relative: str, actual: str) -> None:
    path = GOLDEN / relative
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    assert path.exists(), f"missing golden {relative}; run with UPDATE_GOLDEN=1 and review it"
    # Read as bytes: read_text would turn the CRLF of Gemini's SSE frames into LF.
    assert actual == path.read_bytes().decode("utf-8"), f"output differs from golden {relative}"


def check_decoder_golden(protocol: str, name: str, decode: Callable[[list[bytes]], list[Event]]) -> None:
    """An upstream fixture decoded to the IR: well formed, equal to its golden, and the same at every split."""
    data = fixture(protocol, name)
    whole = decode([data])
    check_well_formed(whole)
    expected = normalise(events_json(whole))
    check_golden(f"{protocol}__to__ir/{name}.jsonl", expected)
    for pieces in splits(data):
        assert normalise(events_json(decode(pieces))) == expected
