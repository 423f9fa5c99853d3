"""A local estimate of a request's input tokens, for `/v1/messages/count_tokens` and for the
`input_tokens` an Anthropic stream must announce in `message_start` before the upstream has said.

Owns the heuristic. Real tokenizers differ per model and are not available offline, so this aims
to be close, not exact: about 4 characters per token for Latin text and code, one token per CJK
character, two characters per token for other scripts; per-message and per-tool overheads; images
by Anthropic's published rule (width * height / 750, after scaling the long side to 1568 px) when
the inline image's header gives its size, else a typical 1,600.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import base64
import json
import math
import struct

from proxy.ir.request import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    ReasoningPart,
    RefusalPart,
    Request,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

MESSAGE_OVERHEAD = 4
TOOL_OVERHEAD = 12
REQUEST_OVERHEAD = 3
DEFAULT_IMAGE_TOKENS = 1600
FILE_PAGE_TOKENS = 1500


def estimate_input_tokens(req: Request) -> int:
    total = REQUEST_OVERHEAD
    for msg in req.messages:
        total += MESSAGE_OVERHEAD + sum(_part(p) for p in msg.parts)
    for tool in req.tools:
        schema = json.dumps(tool.parameters or tool.format or {}, separators=(",", ":"))
        total += TOOL_OVERHEAD + text_tokens(tool.name) + text_tokens(tool.description or "") + text_tokens(schema)
    return total


def text_tokens(text: str) -> int:
    if not text:
        return 0
    ascii_chars = cjk = other = 0
    for ch in text:
        code = ord(ch)
        if code < 128:
            ascii_chars += 1
        elif _is_cjk(code):
            cjk += 1
        else:
            other += 1
    return math.ceil(ascii_chars / 4 + cjk + other / 2)


def _is_cjk(code: int) -> bool:
    return 0x2E80 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF


def _part(part: Part) -> int:
    if isinstance(part, TextPart | RefusalPart):
        return text_tokens(part.text)
    if isinstance(part, ReasoningPart):
        return text_tokens(part.text)
    if isinstance(part, ToolCallPart):
        return text_tokens(part.name) + text_tokens(part.arguments) + 3
    if isinstance(part, ToolResultPart):
        return 3 + sum(_part(p) for p in part.content)
    if isinstance(part, ImagePart):
        return image_tokens(part)
    if isinstance(part, FilePart):
        size = len(part.data or "") * 3 // 4
        return max(FILE_PAGE_TOKENS, size // 3000 * FILE_PAGE_TOKENS // 10) if part.data else FILE_PAGE_TOKENS
    if isinstance(part, AudioPart):
        return len(part.data) * 3 // 4 // 1000  # ~1 token per 1 kB of audio at speech bitrates
    return 0


def image_tokens(image: ImagePart) -> int:
    size = _image_size(image.data) if image.data else None
    if size is None:
        return DEFAULT_IMAGE_TOKENS
    width, height = size
    scale = min(1.0, 1568 / max(width, height, 1))
    return max(1, math.ceil(width * scale * height * scale / 750))


def _image_size(data: str) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, JPEG or WebP header, without decoding the image."""
    try:
        head = base64.b64decode(data[:65536] + "=" * (-len(data[:65536]) % 4), validate=False)
    except ValueError:
        return None
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        return struct.unpack(">II", head[16:24])
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return struct.unpack("<HH", head[6:10])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        if head[12:16] == b"VP8X":
            return 1 + int.from_bytes(head[24:27], "little"), 1 + int.from_bytes(head[27:30], "little")
        if head[12:16] == b"VP8 ":
            w, h = struct.unpack("<HH", head[26:30])
            return w & 0x3FFF, h & 0x3FFF
        return None
    if head[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(head):
            if head[i] != 0xFF:
                return None
            marker = head[i + 1]
            length = struct.unpack(">H", head[i + 2:i + 4])[0]
            if marker in (0xC0, 0xC1, 0xC2):
                h, w = struct.unpack(">HH", head[i + 5:i + 9])
                return w, h
            i += 2 + length
    return None
