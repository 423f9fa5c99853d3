"""Passthrough: a Responses request's tool history repaired on the raw body.

Owns applying the pairing rule (`proxy.ir.repair`) to `input` as sent, for a Responses upstream,
which rejects with a 400 a `function_call` / `custom_tool_call` item without its `*_output` item
(matched by `call_id`) and an output item whose call it cannot find. A call without an output gets
a synthetic output (saying the result was lost) after the run of call and output items it is in;
an output with no call becomes a user message saying what it was, in its place. Every other item
and field goes up as sent; a request with nothing to repair is returned as the very same object.

Only what the request itself shows is repaired. With `previous_response_id` or `conversation` the
calls an output answers may live upstream, so outputs without a call in `input` are left alone;
with `item_reference` items either half may be behind a reference, so nothing is touched.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import logging
from typing import Any

from proxy.ir.repair import MISSING_RESULT, match_results, orphan_text

log = logging.getLogger(__name__)

OUTPUT_OF = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
_PAIRED_TYPES = {*OUTPUT_OF, *OUTPUT_OF.values()}


def repair_tool_pairs(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with every call in `input` answered and, where it can tell, every output owned."""
    items = body.get("input")
    if not isinstance(items, list) or any(_type(item) == "item_reference" for item in items):
        return body
    calls = [k for k, item in enumerate(items) if _type(item) in OUTPUT_OF]
    outputs = [k for k, item in enumerate(items) if _type(item) in OUTPUT_OF.values()]
    pairing = match_results([_call_id(items[k]) for k in calls], [_call_id(items[k]) for k in outputs])
    strays = [] if body.get("previous_response_id") or body.get("conversation") else pairing.stray
    if not pairing.missing and not strays:
        return body
    out = list(items)
    for position in strays:
        out[outputs[position]] = _as_user(items[outputs[position]])
    for call_id in reversed(pairing.missing):  # from the end, so earlier insert points stay put
        at = next(k for k in calls if _call_id(items[k]) == call_id)
        end = at
        while end + 1 < len(items) and _type(items[end + 1]) in _PAIRED_TYPES:
            end += 1
        output = {"type": OUTPUT_OF[_type(items[at])], "call_id": call_id, "output": MISSING_RESULT}
        out.insert(end + 1, output)
    log.info("repaired the tool history for the upstream: %d call(s) without an output answered with a "
             "placeholder, %d output(s) without a call turned into user text", len(pairing.missing), len(strays))
    return {**body, "input": out}


def _type(item: Any) -> Any:
    return item.get("type") if isinstance(item, dict) else None


def _call_id(item: dict[str, Any]) -> str:
    return str(item.get("call_id"))


def _as_user(item: dict[str, Any]) -> dict[str, Any]:
    output = item.get("output")
    text = output if isinstance(output, str) else "".join(
        str(p.get("text", "")) for p in output or [] if isinstance(p, dict) and isinstance(p.get("text"), str))
    return {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": orphan_text(_call_id(item), text)}]}
