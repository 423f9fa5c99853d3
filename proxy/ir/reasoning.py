"""Reasoning tokens the proxy makes or wraps, and telling them apart from an upstream's own.

Owns two things:
- Minted signatures. An Anthropic client must receive a `signature_delta` for every thinking
  block, but reasoning from an OpenAI-compatible upstream (DeepSeek's `reasoning_content`) has no
  signature. The proxy mints an opaque one with a fixed prefix, so that when the client replays
  the block the proxy recognises it and never sends it to a real Anthropic upstream, which would
  reject it as an invalid signature.
- Telling where a client's replayed reasoning came from: reasoning with no opaque token but
  ones the proxy made came from an OpenAI-compatible upstream as plain `reasoning_content`, and
  may go back to such an upstream as that (`from_plain_upstream`).
- Envelopes, so that opaque reasoning survives a client of another protocol. An Anthropic
  thinking signature (or redacted_thinking data) travels to a Responses client inside a reasoning
  item's `encrypted_content`; a Responses `encrypted_content` travels to an Anthropic client as
  the thinking block's `signature`. When the client sends the item or block back, the envelope is
  opened and the upstream gets its own token back intact. Envelopes carry the minted prefix too,
  so one can never reach an upstream that did not make its contents.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import base64
import hashlib
import json

from proxy.ir.request import ReasoningPart

MINTED_PREFIX = "llmproxy1."
_ANTHROPIC_IN_RESPONSES = MINTED_PREFIX + "an."  # Anthropic signature inside encrypted_content
_RESPONSES_IN_ANTHROPIC = MINTED_PREFIX + "rs."  # Responses encrypted_content inside a signature


def mint_signature(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()[:18]
    return MINTED_PREFIX + base64.urlsafe_b64encode(digest).decode("ascii")


def is_minted(signature: str | None) -> bool:
    return bool(signature) and str(signature).startswith(MINTED_PREFIX)


def from_plain_upstream(part: ReasoningPart) -> bool:
    """Whether a replayed reasoning part is plain reasoning from an OpenAI-compatible upstream: it
    has text and no token of Anthropic's (a signature the proxy did not mint, redacted data) or of a
    Responses upstream (an encrypted_content the proxy did not make). Such upstreams' reasoning
    reaches an Anthropic client under a minted signature and a Responses client as a summary with
    no encrypted_content, so this is how it looks when the client sends it back."""
    if gemini_from_envelope(part.signature) is not None:
        return False  # Gemini's reasoning, carried for its own upstream
    return (bool(part.text) and not part.redacted and (part.signature is None or is_minted(part.signature))
            and (part.encrypted is None or is_minted(part.encrypted)))


def anthropic_to_encrypted(signature: str | None, redacted: str | None) -> str | None:
    """An Anthropic thinking signature / redacted data as a Responses `encrypted_content`."""
    if redacted:
        payload = {"redacted": redacted}
    elif signature and not is_minted(signature):
        payload = {"signature": signature}
    else:
        return None
    return _ANTHROPIC_IN_RESPONSES + base64.urlsafe_b64encode(json.dumps(payload).encode()).decode("ascii")


def anthropic_from_encrypted(encrypted: str | None) -> tuple[str | None, str | None] | None:
    """(signature, redacted) from an `encrypted_content` the proxy made, or None if it did not."""
    if not encrypted or not encrypted.startswith(_ANTHROPIC_IN_RESPONSES):
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(encrypted[len(_ANTHROPIC_IN_RESPONSES):]))
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    signature, redacted = payload.get("signature"), payload.get("redacted")
    return (signature if isinstance(signature, str) else None, redacted if isinstance(redacted, str) else None)


def encrypted_to_signature(encrypted: str) -> str:
    """A Responses `encrypted_content` as an Anthropic thinking signature."""
    return _RESPONSES_IN_ANTHROPIC + encrypted


def encrypted_from_signature(signature: str | None) -> str | None:
    """The `encrypted_content` inside a signature the proxy made, or None."""
    if signature and signature.startswith(_RESPONSES_IN_ANTHROPIC):
        return signature[len(_RESPONSES_IN_ANTHROPIC):]
    return None


# Gemini thought signatures (docs/protocols.md §9.6). Gemini puts a `thoughtSignature` on a part —
# a thought, an empty text part after the thought, a function call, a text part — and it must go
# back on the same part to the upstream that issued it, and nowhere else. In the IR it travels as a
# ReasoningPart whose `signature` is an envelope naming its origin (the upstream's name and the
# model that answered) and where the signature sat, relative to that reasoning part:
#   "thought"  on the thought text part itself (the ReasoningPart's text)
#   "empty"    on an empty text part just after the thought text
#   "next"     on the part that follows the ReasoningPart in the message (a functionCall, a text)
#   "prev"     on the part just before it (a text part whose signature arrived at its end)
# The envelope carries the minted prefix, so every other upstream's encoder leaves it out.
_GEMINI = MINTED_PREFIX + "gm."
GEMINI_PLACEMENTS = ("thought", "empty", "next", "prev")


def gemini_envelope(signature: str, origin: str, placement: str) -> str:
    """A Gemini `thoughtSignature` as the opaque token a client of any protocol keeps."""
    payload = {"s": signature, "o": origin, "p": placement}
    return _GEMINI + base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode("ascii")


def gemini_from_envelope(value: str | None) -> tuple[str, str, str] | None:
    """(signature, origin, placement) from an envelope `gemini_envelope` made, or None if it is not one."""
    if not value or not value.startswith(_GEMINI):
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(value[len(_GEMINI):]))
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    signature, origin, placement = payload.get("s"), payload.get("o"), payload.get("p")
    if not (isinstance(signature, str) and isinstance(origin, str) and placement in GEMINI_PLACEMENTS):
        return None
    return signature, origin, placement


def gemini_origin(upstream: str, model_version: str) -> str:
    """Who issued a Gemini signature: signatures are bound to the model and the route that made them."""
    return f"{upstream}/{model_version}"


def signature_to_encrypted(signature: str | None, redacted: str | None) -> str | None:
    """A reasoning part's opaque token as a Responses `encrypted_content`: a Gemini envelope as it
    is (it is the proxy's own already), an Anthropic signature or redacted data wrapped."""
    if signature and gemini_from_envelope(signature) is not None:
        return signature
    return anthropic_to_encrypted(signature, redacted)
