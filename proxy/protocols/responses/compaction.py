"""Compaction of a Responses conversation, on upstreams that cannot do it themselves
(docs/protocols.md §5.6).

Codex compacts a long session in one of two ways: `POST /responses/compact` (v1), which answers
`{"output": [...]}` — the user's messages kept, then one `compaction` item; or a normal
`/responses` request whose last input item is `{"type": "compaction_trigger"}` (v2), whose answer
must hold exactly one `compaction` output item before `response.completed`. Either way the
`compaction` item's `encrypted_content` is opaque to the client and comes back in the input of
later requests, where the model that made it reads it.

A Responses upstream that supports it gets both as they are (passthrough). For Chat and Messages
upstreams the proxy performs it: the same upstream model is asked, in one request, to summarise
the conversation so far (the trigger becomes that instruction); the summary is *sealed* —
authenticated encryption (AES-256-GCM) with the proxy's compaction key — into the item's
`encrypted_content`, so it travels through the client unreadable and unalterable; and when it
comes back, on any upstream, it is opened and expanded into a message carrying the summary. A blob
that does not open (altered, or sealed under another key) is a 400. A compaction item some
upstream made itself can only go back to an upstream of that kind: to others it is dropped, with
a log line.

Owns the sealing, the rewriting of input items for an upstream, and the shapes of the answers.
Pure: must not import Flask or requests; the key comes from the caller.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from proxy.errors import ProxyError
from proxy.ir.reasoning import MINTED_PREFIX
from proxy.ir.response import Usage
from proxy.protocols.responses.response import new_id
from proxy.protocols.responses.vocabulary import usage_to_responses

log = logging.getLogger(__name__)

TRIGGER = "compaction_trigger"
ITEM = "compaction"
SEALED_PREFIX = MINTED_PREFIX + "cmp."  # the proxy's own blobs, told apart from an upstream's
_NONCE = 12
_CONTEXT = b"llm-proxy compaction v1"  # HKDF info and AEAD associated data: a blob means only this

SUMMARY_INSTRUCTION = (
    "Context checkpoint: this conversation is being compacted, and what you write now replaces "
    "everything above it. Write a summary that lets you continue the work seamlessly from it alone: "
    "the user's goals and constraints, what has been done and decided (files, commands, results, "
    "errors and their fixes), the current state, and the exact next steps. Keep names, paths and "
    "values verbatim. Do not call tools; answer with the summary only."
)
SUMMARY_HEADER = "Summary of the conversation so far (earlier turns were compacted):\n\n"


class Sealer:
    """Seals and opens compaction summaries with a key derived from the configured secret."""

    def __init__(self, secret: str) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_CONTEXT).derive(secret.encode("utf-8"))
        self._aead = AESGCM(key)

    def seal(self, summary: str, model: str) -> str:
        nonce = os.urandom(_NONCE)
        payload = json.dumps({"summary": summary, "model": model, "created_at": int(time.time())},
                             ensure_ascii=False).encode("utf-8")
        blob = nonce + self._aead.encrypt(nonce, payload, _CONTEXT)
        return SEALED_PREFIX + base64.urlsafe_b64encode(blob).decode("ascii")

    def open(self, sealed: str, where: str) -> str:
        """The summary in a blob of ours, or a 400 naming `where` (the item's field) if it does not open."""
        try:
            blob = base64.urlsafe_b64decode(sealed[len(SEALED_PREFIX):].encode("ascii"))
            payload = json.loads(self._aead.decrypt(blob[:_NONCE], blob[_NONCE:], _CONTEXT))
            summary = payload["summary"]
        except (InvalidTag, ValueError, KeyError, TypeError, UnicodeEncodeError):
            raise ProxyError(400, f"{where}: this compaction item was not made by this proxy or was altered "
                                  "(its encrypted_content does not authenticate under the proxy's compaction key); "
                                  "send the conversation without it, or the item exactly as it was returned.",
                             "invalid_request", code="invalid_encrypted_content", param=where) from None
        return str(summary)


def is_sealed(item: dict[str, Any]) -> bool:
    content = item.get("encrypted_content")
    return item.get("type") == ITEM and isinstance(content, str) and content.startswith(SEALED_PREFIX)


def wants_compaction(items: list[Any]) -> bool:
    """v2: the request's last input item is the trigger."""
    return bool(items) and isinstance(items[-1], dict) and items[-1].get("type") == TRIGGER


def check_sealed(items: list[Any], sealer: Sealer) -> None:
    """Refuse, before anything is sent anywhere, a request carrying a blob of ours that does not open."""
    for i, item in enumerate(items):
        if isinstance(item, dict) and is_sealed(item):
            sealer.open(item["encrypted_content"], f"input[{i}].encrypted_content")


def for_upstream(items: list[dict[str, Any]], upstream_protocol: str, sealer: Sealer,
                 summarise: bool) -> list[dict[str, Any]]:
    """The input items as an upstream of `upstream_protocol` can be sent them: the proxy's sealed
    summaries expanded into messages (no upstream can read them); for an upstream that is not a
    Responses one, the trigger — or, with `summarise` (v1), the end of the input — becomes the
    summarisation instruction, and compaction items made by some upstream are dropped."""
    responses = upstream_protocol == "responses"
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == ITEM and is_sealed(item):
            out.append(summary_message(sealer.open(item["encrypted_content"], f"input[{i}].encrypted_content")))
        elif kind == ITEM and not responses:
            log.warning("dropped a compaction item made by another upstream: a %s upstream cannot read it",
                        upstream_protocol)
        elif kind == TRIGGER and not responses:
            out.append(instruction_message())
        else:
            out.append(item)
    if summarise and not responses:
        out.append(instruction_message())
    return out


def summary_message(summary: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": SUMMARY_HEADER + summary}]}


def instruction_message() -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": SUMMARY_INSTRUCTION}]}


def compaction_item(sealer: Sealer, summary: str, model: str) -> dict[str, Any]:
    return {"id": new_id("cmp"), "type": ITEM, "encrypted_content": sealer.seal(summary, model)}


def kept_messages(items: list[Any]) -> list[dict[str, Any]]:
    """What `/responses/compact` keeps of the input beside the compaction item: the user's own
    messages, as the real endpoint does (the model's turns and tool traffic are in the summary)."""
    kept = []
    for item in items:
        if not isinstance(item, dict) or (item.get("type") or "message") != "message" or item.get("role") != "user":
            continue
        kept.append({key: value for key, value in item.items() if key != "id"})
    return kept


def compact_body(items: list[Any], item: dict[str, Any], usage: Usage | None) -> dict[str, Any]:
    """The answer of `POST /v1/responses/compact` (v1)."""
    return {"id": new_id("resp"), "object": "response.compaction", "created_at": int(time.time()),
            "output": [*kept_messages(items), item], "usage": usage_to_responses(usage or Usage())}
