"""Thought signatures on a request bound for a Gemini upstream: what the API validates, made true.

Owns two rules of docs/protocols.md §9.6. Gemini validates signatures in the *current turn* only —
the contents after the last user content that is more than function responses — and there, in
each step (a model content that calls functions), the first functionCall part must carry one
(parallel calls: only the first); without it the API answers 400 "Function call is missing a
thought_signature". A signature the proxy made (prefix `llmproxy1.`) means nothing to Gemini and is
refused as corrupted. So: the proxy's own tokens are taken off, and a step whose first call has
no signature (a history made by another model or upstream) gets the documented validator-skip
value rather than failing.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.reasoning import is_minted
from proxy.protocols.gemini.carrier import is_token
from proxy.protocols.gemini.vocabulary import SKIP_SIGNATURE


def _ours(value: Any) -> bool:
    """A token the proxy made: an envelope, or the base64 carrier a Gemini client got (carrier.py)."""
    return isinstance(value, str) and (is_minted(value) or is_token(value))


def without_minted(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The contents with every thoughtSignature the proxy made removed — and a part that was only
    there to carry one (an empty text part) with it (copies only what changes)."""
    out = []
    for content in contents:
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list) or not any(isinstance(p, dict) and _ours(p.get("thoughtSignature"))
                                                  for p in parts):
            out.append(content)
            continue
        kept = []
        for part in parts:
            if isinstance(part, dict) and _ours(part.get("thoughtSignature")):
                part = {k: v for k, v in part.items() if k != "thoughtSignature"}
                if not part or part == {"text": ""}:
                    continue
            kept.append(part)
        if kept:
            out.append({**content, "parts": kept})
    return out


def current_turn_start(contents: list[dict[str, Any]]) -> int:
    """Index of the first content of the current turn: after the last user content that has
    something besides function responses (0 when there is none)."""
    for i in range(len(contents) - 1, -1, -1):
        content = contents[i]
        if not isinstance(content, dict) or content.get("role", "user") != "user":
            continue
        parts = content.get("parts") or []
        if any(isinstance(p, dict) and "functionResponse" not in p for p in parts):
            return i + 1
    return 0


def sign_current_turn(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The contents with the skip value on the first functionCall of each step of the current turn
    that has no signature of its own (copies only what changes)."""
    out = list(contents)
    for i in range(current_turn_start(contents), len(contents)):
        content = contents[i]
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        parts = content.get("parts") or []
        first = next((j for j, p in enumerate(parts) if isinstance(p, dict) and "functionCall" in p), None)
        if first is None or parts[first].get("thoughtSignature"):
            continue
        signed = list(parts)
        signed[first] = {**parts[first], "thoughtSignature": SKIP_SIGNATURE}
        out[i] = {**content, "parts": signed}
    return out
