"""No thinking block after a Messages answer's last word: a Gemini signature that belongs to text.

Gemini signs the last text part of an answer that calls no function; in the IR that signature is a
reasoning part of its own after the text (docs/protocols.md §9.6). A Messages client would get it as
a thinking block *after* the text — which the real API never sends, and which makes Claude Code
print an empty answer (`claude -p` prints the last block). Gemini does not validate text signatures
(only a step's first call's), so such a block is held until the next block starts (it then goes
before it, where a thinking block may stand) and left out when the message ends instead — counted
in `dropped` ("signature").
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.events import BlockStart, Delta, Event, Failure, Finish, Signature
from proxy.ir.reasoning import gemini_from_envelope
from proxy.ir.request import OutputPart, ReasoningPart


class TrailingSignatures:
    """An event filter holding a reasoning block that has no text yet (see the module's docstring)."""

    def __init__(self, dropped: dict[str, int]) -> None:
        self._dropped = dropped
        self._held: list[Event] = []
        self._key: int | None = None
        self._gemini = False

    def feed(self, ev: Event) -> list[Event]:
        if self._key is None:
            if isinstance(ev, BlockStart) and _bare_reasoning(ev.part):
                self._held, self._key, self._gemini = [ev], ev.block, False
                return []
            return [ev]
        if (isinstance(ev, Delta) and ev.block == self._key) or isinstance(ev, BlockStart | Failure):
            return [*self._release(), ev]  # it has text after all, or something follows it
        if isinstance(ev, Finish):
            if self._gemini:
                self._dropped["signature"] = self._dropped.get("signature", 0) + 1
                self._held, self._key = [], None
                return [ev]
            return [*self._release(), ev]
        if getattr(ev, "block", None) == self._key:
            if isinstance(ev, Signature) and gemini_from_envelope(ev.signature) is not None:
                self._gemini = True
            self._held.append(ev)
            return []
        return [ev]

    def _release(self) -> list[Event]:
        held, self._held, self._key = self._held, [], None
        return held


def _bare_reasoning(part: OutputPart) -> bool:
    return isinstance(part, ReasoningPart) and not part.text and part.redacted is None


def without_trailing(output: list[Any], dropped: dict[str, int]) -> list[Any]:
    """A whole answer's parts without the signature-only Gemini reasoning parts at its end."""
    end = len(output)
    while end and isinstance(output[end - 1], ReasoningPart) and not output[end - 1].text \
            and gemini_from_envelope(output[end - 1].signature) is not None:
        end -= 1
    if end < len(output):
        dropped["signature"] = dropped.get("signature", 0) + len(output) - end
    return output[:end]
