"""Anthropic request decoding details, tool-result repair, and the local token estimate."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from proxy.errors import ProxyError
from proxy.ir.repair import MISSING_RESULT, pair_tool_results
from proxy.ir.request import ImagePart, Message, Request, TextPart, ToolCallPart, ToolResultPart
from proxy.ir.tokens import estimate_input_tokens, image_tokens, text_tokens
from proxy.protocols.messages.request import decode


@pytest.mark.parametrize(("body", "message"), [
    ({"max_tokens": 5, "messages": []}, "model: is required"),
    ({"model": "m", "messages": []}, "max_tokens: is required"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "bot", "content": "x"}]}, "messages[0].role: must be one of"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user"}]}, "messages[0].content: is required"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"text": "x"}]}]},
     "messages[0].content[0].type: is required"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "sometimes"}},
     "tool_choice.type: must be one of"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "ftp", "url": "x"}}]}]}, "messages[0].content[0].source.type"),
])
def test_errors_name_the_field(body: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ProxyError) as caught:
        decode(body)
    assert caught.value.info.status == 400 and message in caught.value.info.message


def test_count_tokens_bodies_need_no_max_tokens() -> None:
    req = decode({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, count_tokens=True)
    assert req.max_tokens is None


def test_system_role_messages_and_documents() -> None:
    req = decode({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                                                      "data": "doc text"}}]},
        {"role": "system", "content": "a reminder"}]})
    assert [m.role for m in req.messages] == ["user", "system"]
    assert req.messages[0].parts == [TextPart("doc text")]


def test_repair_orders_pairs_and_fills_results() -> None:
    calls = [ToolCallPart("a", "f"), ToolCallPart("b", "f")]
    repaired = pair_tool_results([
        Message("tool", [ToolResultPart("ghost", [TextPart("old")])]),  # no call before it
        Message("assistant", list(calls)),
        Message("tool", [ToolResultPart("b", [TextPart("B")]), ToolResultPart("zzz", [TextPart("?")])]),
        Message("user", [TextPart("next")]),
    ])
    assert [m.role for m in repaired] == ["user", "assistant", "tool", "user", "user"]
    assert repaired[0].parts == [TextPart("[Result of tool call ghost]: old")]
    a, b = repaired[2].parts
    assert isinstance(a, ToolResultPart) and a.is_error and a.text() == MISSING_RESULT
    assert isinstance(b, ToolResultPart) and b.text() == "B"
    assert repaired[3].parts == [TextPart("[Result of tool call zzz]: ?")]


def png(width: int, height: int) -> str:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return base64.b64encode(raw).decode()


def test_estimates() -> None:
    assert text_tokens("hello world, this is english") == 7  # 28 chars / 4
    assert text_tokens("你好世界") == 4
    assert image_tokens(ImagePart(data=png(1000, 1000))) == 1334  # 1000*1000/750
    assert image_tokens(ImagePart(data=png(4000, 2000))) == 1640  # scaled to 1568 x 784
    assert image_tokens(ImagePart(url="https://x/y.png")) == 1600
    small = estimate_input_tokens(Request("m", [Message("user", [TextPart("hi")])]))
    big = estimate_input_tokens(Request("m", [Message("user", [TextPart("hi " * 400)])]))
    assert small < 15 and 290 < big < 320
