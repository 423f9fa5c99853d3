"""Signatures the proxy mints for reasoning that came without one.

Owns telling our own reasoning signatures apart from real ones. An Anthropic client must receive a
`signature_delta` for every thinking block, but reasoning from an OpenAI-compatible upstream
(DeepSeek's `reasoning_content`) has no signature. The proxy mints an opaque one with a fixed
prefix, so that when the client replays the block the proxy recognises it and never sends it to
a real Anthropic upstream, which would reject it as an invalid signature.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import base64
import hashlib

MINTED_PREFIX = "llmproxy1."


def mint_signature(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()[:18]
    return MINTED_PREFIX + base64.urlsafe_b64encode(digest).decode("ascii")


def is_minted(signature: str | None) -> bool:
    return bool(signature) and str(signature).startswith(MINTED_PREFIX)
