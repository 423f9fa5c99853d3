"""The opaque `thoughtSignature` the proxy gives a Gemini *client* for reasoning another upstream
made (Anthropic thinking and its signature, a Responses reasoning item and its encrypted content,
plain reasoning from a Chat upstream), and reading it back when the client replays its history.

Why a token of its own, not the shared envelopes of `proxy.ir.reasoning` as they are:
- google-genai (Python) types `Part.thought_signature` as bytes and validates it as base64
  (`google/genai/_common.py` BaseModel config `val_json_bytes='base64'`): a value with a `.` in it,
  as every `llmproxy1.` envelope has, fails validation and the whole response with it. The token
  is therefore the *standard* base64 of its bytes, padded — what pydantic writes back when the SDK
  serialises the part again, so the client returns the very same string.
- gemini-cli keeps no `thought: true` part in its history (`processStreamResponse` filters
  `!part.thought`; `stripThoughts`), so a token on a thought part would never come back, and with it
  the thinking text an Anthropic signature is only valid with. The token therefore rides on the
  *next* non-thought part (a functionCall, a text part, or an empty text part at the end: where
  Gemini itself puts signatures) and carries every reasoning part since the previous carrier whole:
  text, signature, redacted data, encrypted content, item id.
The bytes start with the minted prefix (`llmproxy1.gc.`), so no real Gemini upstream ever gets one:
`is_token` tells a passthrough to leave it out.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from proxy.ir.reasoning import MINTED_PREFIX
from proxy.ir.request import ReasoningPart

_PREFIX = (MINTED_PREFIX + "gc.").encode("ascii")
_FIELDS = (("t", "text"), ("s", "signature"), ("r", "redacted"), ("e", "encrypted"), ("i", "id"))


def worth_carrying(part: ReasoningPart) -> bool:
    """Reasoning a Gemini client must give back: any text (a Chat upstream's plain reasoning goes
    back to it as `reasoning_content`) or any opaque token."""
    return bool(part.text or part.signature or part.redacted or part.encrypted)


def pack(parts: list[ReasoningPart]) -> str:
    """Reasoning parts as one `thoughtSignature` value (standard, padded base64)."""
    items = [{short: getattr(p, name) for short, name in _FIELDS if getattr(p, name)} for p in parts]
    raw = _PREFIX + json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.b64encode(raw).decode("ascii")


def _raw(value: Any) -> bytes | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if raw.startswith(_PREFIX) else None


def is_token(value: Any) -> bool:
    """Whether a `thoughtSignature` is one the proxy made for a Gemini client."""
    return _raw(value) is not None


def unpack(value: Any) -> list[ReasoningPart] | None:
    """The reasoning parts a token carries, or None when `value` is not a token the proxy made."""
    raw = _raw(value)
    if raw is None:
        return None
    try:
        items = json.loads(raw[len(_PREFIX):])
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    parts = []
    for item in items:
        if isinstance(item, dict):
            fields = {name: item[short] for short, name in _FIELDS if isinstance(item.get(short), str)}
            parts.append(ReasoningPart(**fields))
    return parts
