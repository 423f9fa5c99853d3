"""Thought signatures as the demo's Gemini face issues and checks them, the way Gemini 3 does.

Owns minting a signature for a part of an answer and the check a request's history must pass when
signatures are enforced (docs: ai.google.dev/gemini-api/docs/thought-signatures, and the errors the
real API is seen answering in public issue trackers, 2025-11 to 2026-08):
- which requests get signed answers and which are checked: a model whose name starts with
  "gemini-3" (both, as Gemini 3 does), `[demo:gemini-signatures]` (signed answers only, as Gemini
  2.5 with thinking gives them without insisting), `[demo:enforce-signatures]` (both);
- a signature is base64 of a kind byte and an HMAC, under a secret of the demo's, over the model
  the URL named and, for a function call, its name and arguments: one minted for another model,
  moved to another call or to a text part, or made up, does not verify;
- the check covers the current turn only (the contents after the last user content that is not
  only functionResponse parts): in each model content with functionCall parts the first call must
  carry a signature (a missing one: the API's 400 naming the call and the content's 1-based
  position); every signature present in the turn must verify ("Corrupted thought signature.");
  the documented validator-skip value passes anywhere. Earlier turns are not looked at.
Pure: must not import Flask, requests or gevent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

SECRET = b"llm-proxy demo upstream: Gemini thought signatures"
SKIP = "skip_thought_signature_validator"  # the value Gemini documents for a call whose signature is unknown
SIGNING_MODELS = ("gemini-3",)
ISSUE, ENFORCE = "gemini-signatures", "enforce-signatures"  # the directives ([demo:NAME])
_KINDS = {"call": b"C", "thought": b"T", "text": b"X"}
DOCS = "https://ai.google.dev/gemini-api/docs/thought-signatures"


def signs(model: str, directives: dict[str, str]) -> bool:
    """Whether answers to this request carry signatures."""
    return model.startswith(SIGNING_MODELS) or ISSUE in directives or ENFORCE in directives


def enforces(model: str, directives: dict[str, str]) -> bool:
    """Whether this request's current turn must carry the signatures its answers were given."""
    return model.startswith(SIGNING_MODELS) or ENFORCE in directives


def mint(model: str, kind: str, call: dict[str, Any] | None = None) -> str:
    """The signature for a part of `kind` ("call", "thought", "text") of an answer by `model`;
    a call's is bound to its name and arguments too."""
    tag = _KINDS[kind]
    mac = hmac.new(SECRET, b"\0".join([model.encode(), tag, _call_bytes(call)]), hashlib.sha256).digest()
    return base64.b64encode(tag + mac).decode()


def _call_bytes(call: dict[str, Any] | None) -> bytes:
    if call is None:
        return b""
    return json.dumps([call.get("name"), call.get("args") or {}], sort_keys=True, separators=(",", ":")).encode()


def valid(signature: Any, model: str, part: dict[str, Any]) -> bool:
    """Whether `signature`, found on `part` of a model content, is one this model minted for it."""
    if signature == SKIP:
        return True
    raw = _bytes(signature)
    if raw is None:
        return False
    call = part.get("functionCall")
    kinds = ("call",) if isinstance(call, dict) else ("thought", "text")
    return any(hmac.compare_digest(raw, base64.b64decode(mint(model, kind, call if kind == "call" else None)))
               for kind in kinds)


def _bytes(signature: Any) -> bytes | None:
    """A signature's bytes: it is a proto `bytes` field, which JSON carries in base64 of either
    alphabet, padded or not (google-genai decodes it and sends it back URL-safe)."""
    if not isinstance(signature, str):
        return None
    text = signature.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError:  # binascii.Error is one
        return None


def current_turn(contents: list[Any]) -> int:
    """Where the current turn starts: after the last user content that is not only functionResponses."""
    start = 0
    for i, content in enumerate(contents):
        if isinstance(content, dict) and content.get("role", "user") == "user":
            parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
            if not parts or not all("functionResponse" in p for p in parts):
                start = i + 1
    return start


def refusal(contents: list[Any], model: str) -> dict[str, Any] | None:
    """The 400 body Gemini 3 answers a history whose current turn lacks or garbles its signatures."""
    for i in range(current_turn(contents), len(contents)):
        content = contents[i]
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        first_call = True
        for part in content.get("parts") or []:
            if not isinstance(part, dict):
                continue
            signature = part.get("thoughtSignature")
            if isinstance(part.get("functionCall"), dict) and first_call:
                first_call = False
                if not signature:
                    name = part["functionCall"].get("name")
                    return _error(
                        "Function call is missing a thought_signature in functionCall parts. This is required for "
                        "tools to work correctly, and missing thought_signature may lead to degraded model "
                        f"performance. Additional data, function call `default_api:{name}` , position {i + 1}. "
                        f"Please refer to {DOCS} for more details.")
            if signature and not valid(signature, model, part):
                return _error("Corrupted thought signature.")
    return None


def _error(message: str) -> dict[str, Any]:
    return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
