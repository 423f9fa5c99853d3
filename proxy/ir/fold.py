"""Folding a stream of internal events into the `Response` a non-streamed request would return.

Owns the rule that stream and non-stream share semantics: a client encoder's non-stream output
for `fold(events)` must match what its stream encoder emitted for `events`. Also checks that an
event sequence is well-formed, which the golden and fuzz tests use on every decoder.

Pure: must not import Flask or requests.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from proxy.ir.events import (
    BlockStart,
    BlockStop,
    Delta,
    Event,
    Failure,
    Finish,
    Signature,
    Start,
    UsageUpdate,
)
from proxy.ir.request import OutputPart, ReasoningPart, RefusalPart, TextPart, ToolCallPart
from proxy.ir.response import Response, Usage


class Folder:
    """Accumulates events one at a time (the relay also uses it to track a live stream)."""

    def __init__(self) -> None:
        self.response = Response(id="", model="", created=0)
        self.open: OutputPart | None = None

    def add(self, ev: Event) -> None:
        resp = self.response
        if isinstance(ev, Delta):
            part = self.open
            if isinstance(part, ToolCallPart):
                part.arguments += ev.text
            elif part is not None:
                part.text += ev.text
        elif isinstance(ev, BlockStart):
            self.open = copy.copy(ev.part)
            resp.output.append(self.open)
        elif isinstance(ev, BlockStop):
            self.open = None
        elif isinstance(ev, Signature):
            if isinstance(self.open, ReasoningPart):
                if ev.signature is not None:
                    self.open.signature = ev.signature
                if ev.encrypted is not None:
                    self.open.encrypted = ev.encrypted
        elif isinstance(ev, UsageUpdate):
            if resp.usage is None:
                resp.usage = Usage()
            resp.usage.merge(ev.usage)
        elif isinstance(ev, Start):
            resp.id, resp.model, resp.created = ev.id, ev.model, ev.created
            if ev.usage is not None:
                resp.usage = Usage()
                resp.usage.merge(ev.usage)
        elif isinstance(ev, Finish):
            resp.finish_reason = ev.reason
            resp.stop_sequence = ev.stop_sequence
        elif isinstance(ev, Failure):
            resp.error = ev.error


def fold(events: Iterable[Event]) -> Response:
    folder = Folder()
    for ev in events:
        folder.add(ev)
    return folder.response


def check_well_formed(events: list[Event]) -> None:
    """Raise AssertionError describing the first rule of proxy.ir.events a sequence breaks."""
    if not events:
        raise AssertionError("empty event stream")
    if isinstance(events[0], Failure):
        if len(events) != 1:
            raise AssertionError("events after a Failure")
        return
    if not isinstance(events[0], Start):
        raise AssertionError(f"stream starts with {type(events[0]).__name__}, not Start")
    open_part: OutputPart | None = None
    for i, ev in enumerate(events[1:], start=1):
        name = type(ev).__name__
        last = i == len(events) - 1
        if isinstance(ev, Start):
            raise AssertionError(f"second Start at {i}")
        if isinstance(ev, BlockStart):
            if open_part is not None:
                raise AssertionError(f"BlockStart at {i} while a block is open")
            open_part = ev.part
        elif isinstance(ev, Delta | Signature):
            if open_part is None:
                raise AssertionError(f"{name} at {i} outside a block")
            if isinstance(ev, Signature) and not isinstance(open_part, ReasoningPart):
                raise AssertionError(f"Signature at {i} in a {type(open_part).__name__}")
            if isinstance(ev, Delta) and not isinstance(
                open_part, TextPart | ReasoningPart | RefusalPart | ToolCallPart
            ):
                raise AssertionError(f"Delta at {i} in a {type(open_part).__name__}")
        elif isinstance(ev, BlockStop):
            if open_part is None:
                raise AssertionError(f"BlockStop at {i} with no open block")
            open_part = None
        elif isinstance(ev, Finish | Failure):
            if not last:
                raise AssertionError(f"{name} at {i} is not the last event")
            if isinstance(ev, Finish) and open_part is not None:
                raise AssertionError("Finish while a block is still open")
    if not isinstance(events[-1], Finish | Failure):
        raise AssertionError(f"stream ends with {type(events[-1]).__name__}, not Finish or Failure")


def unfold(resp: Response) -> list[Event]:
    """The event stream that folds back into `resp`: used when a client asked to stream but the
    upstream answered with one JSON body, so the client still gets a proper stream."""
    events: list[Event] = [Start(resp.id, resp.model, resp.created)]
    for part in resp.output:
        if isinstance(part, ReasoningPart) and part.redacted is not None:
            events += [BlockStart(copy.copy(part)), BlockStop()]
            continue
        skeleton: OutputPart
        if isinstance(part, ToolCallPart):
            skeleton = ToolCallPart(part.id, part.name, "", part.kind, part.item_id)
            text = part.arguments
        elif isinstance(part, ReasoningPart):
            skeleton = ReasoningPart(id=part.id)
            text = part.text
        else:
            skeleton = type(part)("")
            text = part.text
        events.append(BlockStart(skeleton))
        if text:
            events.append(Delta(text))
        if isinstance(part, ReasoningPart) and (part.signature or part.encrypted):
            events.append(Signature(part.signature, part.encrypted))
        events.append(BlockStop())
    if resp.usage is not None:
        events.append(UsageUpdate(resp.usage))
    if resp.error is not None:
        events.append(Failure(resp.error))
    else:
        events.append(Finish(resp.finish_reason or "stop", resp.stop_sequence))
    return events
