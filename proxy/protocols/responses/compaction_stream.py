"""The answer to a compaction request that the proxy performed (proxy.protocols.responses.compaction),
as a Responses stream: the upstream's summary in, exactly one `compaction` output item out.

Owns the client side of a v2 compaction over a Chat or Messages upstream, as a state machine over
the internal events of the summarisation request: `response.created` and `response.in_progress`
when the upstream begins; the summary's text collected silently (it is the item's sealed content,
never shown); at the end one `compaction` item — `output_item.added`, `output_item.done` — and
`response.completed` with it as the only output and the upstream's usage, which is what Codex
waits for ("exactly one compaction output item"). Anything else the model produced (reasoning, a
tool call it was told not to make) is left out. Keepalives are a repeated `response.in_progress`,
as in every Responses stream; a failure is `error` then `response.failed`, with no item.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

from typing import Any

from proxy.ir.events import BlockStart, Delta, Event, Failure, Finish, Start, UsageUpdate
from proxy.ir.request import TextPart
from proxy.ir.response import ErrorInfo
from proxy.protocols.responses.compaction import Sealer, compaction_item
from proxy.protocols.responses.stream_encode import ResponsesStreamEncoder


class CompactionStreamEncoder(ResponsesStreamEncoder):
    """The Responses stream encoder's lifecycle (created, in_progress, keepalives, sequence numbers,
    failures) around one item of its own: no block of the upstream's answer becomes an item."""

    def __init__(self, body: dict[str, Any], model: str, sealer: Sealer) -> None:
        super().__init__(body, model, set(), False)
        self.model = model
        self._sealer = sealer
        self._text_blocks: set[int] = set()
        self._summary: list[str] = []

    def encode(self, ev: Event) -> list[bytes]:
        if self.done:
            return []
        if isinstance(ev, BlockStart):
            if isinstance(ev.part, TextPart):
                self._text_blocks.add(ev.block)
            else:
                self._text_blocks.discard(ev.block)  # a key may be reused for another kind of block
            return []
        if isinstance(ev, Delta):
            if ev.block in self._text_blocks:
                self._summary.append(ev.text)
            return []
        if isinstance(ev, UsageUpdate | Start) and ev.usage is not None:
            self._usage.merge(ev.usage)
        if isinstance(ev, Start):
            return self._begin()
        if isinstance(ev, Finish):
            return self._compacted()
        if isinstance(ev, Failure):
            return self.fail(ev.error)
        return []

    def _compacted(self) -> list[bytes]:
        summary = "".join(self._summary).strip()
        if not summary:
            return self.fail(ErrorInfo("upstream_error", "the upstream answered the compaction request with no "
                                                         "summary", 502))
        frames = self._begin()
        item = compaction_item(self._sealer, summary, self.model)
        frames += [self._event("response.output_item.added", output_index=0, item=item),
                   self._event("response.output_item.done", output_index=0, item=item)]
        self.done = True
        self.final = self.response.snapshot("completed", [item], self._usage)
        frames.append(self._event("response.completed", response=self.final))
        return frames
