"""Internal stream events: what every upstream stream decoder emits and every client encoder reads.

The event stream is *sequential*: at most one output block is open at a time, as the Messages
and Responses wire formats require. A well-formed stream is

    Start  (BlockStart  (Delta | Signature)*  BlockStop)*  Finish
           with UsageUpdate allowed anywhere after Start

or it ends early with one `Failure`, after which nothing follows. Decoders of protocols that
interleave blocks (Chat's parallel tool calls) do the sequencing, once, so that no encoder has to.
`proxy.ir.fold` turns a stream into the same `Response` a non-streamed request would give.

Pure data: must not import Flask or requests.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.ir.request import OutputPart
from proxy.ir.response import ErrorInfo, Usage


@dataclass(slots=True)
class Start:
    id: str
    model: str
    created: int
    usage: Usage | None = None  # prompt-side usage when the upstream reports it up front


@dataclass(slots=True)
class BlockStart:
    """Opens a block. `part` is its skeleton: TextPart(""), ReasoningPart(), RefusalPart(""),
    or ToolCallPart(id, name, ""). A ReasoningPart with `redacted` set is complete as it stands."""

    part: OutputPart


@dataclass(slots=True)
class Delta:
    """Text appended to the open block: text, reasoning text, refusal text or tool arguments."""

    text: str


@dataclass(slots=True)
class Signature:
    """The opaque token that closes a reasoning block (Anthropic signature / Responses blob)."""

    signature: str | None = None
    encrypted: str | None = None


@dataclass(slots=True)
class BlockStop:
    pass


@dataclass(slots=True)
class UsageUpdate:
    usage: Usage  # cumulative figures; merge, don't add


@dataclass(slots=True)
class Finish:
    reason: str
    stop_sequence: str | None = None


@dataclass(slots=True)
class Failure:
    error: ErrorInfo


Event = Start | BlockStart | Delta | Signature | BlockStop | UsageUpdate | Finish | Failure
