"""Gemini thought signatures through a Chat client (docs/protocols.md §9.6).

Chat has no field for opaque reasoning, so the proxy uses the one Google's own OpenAI-compatible
endpoint uses for exactly this — `extra_content: {"google": {"thought_signature": …}}` on the tool
call a signature belongs to, and on the message for one that belongs to its reasoning or text —
which clients made for that endpoint keep and send back. The value is always the proxy's envelope
(proxy.ir.reasoning.gemini_envelope: origin and place marked), never Google's bare signature, and a
value that is not one is ignored when it comes back.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.reasoning import gemini_from_envelope
from proxy.ir.request import ReasoningPart, ToolCallPart

FIELD = "extra_content"


def carried(envelope: str) -> dict[str, Any]:
    """The `extra_content` value that carries `envelope`."""
    return {"google": {"thought_signature": envelope}}


def carried_envelope(obj: Any) -> str | None:
    """The proxy's signature envelope an object (tool call, message, delta) carries, or None."""
    extra = obj.get(FIELD) if isinstance(obj, dict) else None
    google = extra.get("google") if isinstance(extra, dict) else None
    value = google.get("thought_signature") if isinstance(google, dict) else None
    return value if isinstance(value, str) and gemini_from_envelope(value) is not None else None


def placed(parts: list[Any]) -> tuple[str | None, dict[int, str]]:
    """Where a Chat message carries the Gemini signatures among `parts`: each that belongs to the part
    after it (`next`) rides on the next tool call (by the call's position among the calls); the last
    of the others — or a `next` with no call after it — on the message."""
    own: str | None = None
    on_calls: dict[int, str] = {}
    pending: str | None = None
    calls = 0
    for part in parts:
        if isinstance(part, ReasoningPart) and part.signature and gemini_from_envelope(part.signature):
            if placement(part.signature) == "next":
                pending = part.signature
            else:
                own = part.signature
        elif isinstance(part, ToolCallPart):
            if pending is not None:
                on_calls[calls] = pending
                pending = None
            calls += 1
    return (pending or own), on_calls


def placement(envelope: str) -> str:
    opened = gemini_from_envelope(envelope)
    return opened[2] if opened is not None else ""
