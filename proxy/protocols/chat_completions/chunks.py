"""Reading an OpenAI-compatible upstream's stream chunks: what its two readers share.

Owns the Chat quirks both the passthrough (which relays the chunks to a Chat client) and the stream
decoder (which translates them for the other protocols' clients) must handle, so that each is
fixed once and the same way on both paths: an error object in place of a chunk, `[DONE]` before
any chunk, tool-call entries without an `index`, and arguments sent as an object instead of JSON
text. (`"stop"` after tool
calls is a question of finish reasons: `vocabulary.stopped_after_calls`; a chunk that is not a
JSON object and a stream closed before its finish reason are said as every protocol's readers say
them: `proxy.protocols.transcode.parse_payload`, `closed_early`.)
Both readers call these for chunks on their way: each must stay as cheap as the inline code it
replaced.
Must not know about either reader's state, and must not import Flask or requests.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from proxy.errors import embedded_error
from proxy.ir.response import ErrorInfo


def error_in_chunk(chunk: dict[str, Any]) -> ErrorInfo:
    """The error a chunk with a truthy `error` stands for: some servers put an error object in the
    stream instead of failing the request, and it is judged like the HTTP error it stands for."""
    return embedded_error(chunk) or ErrorInfo("api_error", "upstream error", 500)


def done_before_any_chunk() -> ErrorInfo:
    """`data: [DONE]` with no chunk before it: no answer at all, which is a failure — what every
    client is told — not an empty answer."""
    return ErrorInfo("upstream_error", "upstream ended the stream without sending any event", 502)


def infer_tool_index(call_id: Any, index_of: Mapping[str, int], indices: Collection[int]) -> int:
    """The index of a tool-call entry that came without one (some compatible servers leave it
    out), given the calls seen so far (`index_of`: their ids; `indices`: all of them): a known id
    continues its call, a new id starts the next one, no id continues the last one."""
    if isinstance(call_id, str) and call_id in index_of:
        return index_of[call_id]
    if call_id or not indices:
        return max(indices, default=-1) + 1
    return max(indices)


def arguments_text(value: Any) -> str:
    """A tool call's arguments (or a fragment of them) as JSON text: a few compatible servers send
    them as an object; none, as no text at all."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
