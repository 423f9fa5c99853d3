"""JSON asked of an upstream that has no JSON mode, by way of a forced tool, and its answer given back
as the client's JSON text.

Owns one rule. A client that asks for any JSON object (Chat `response_format: {type: json_object}`,
Responses `text.format: {type: json_object}`) of an upstream whose protocol has no such mode
(Anthropic Messages has only `json_schema`, and that only on recent models) gets its request sent
with one more tool, `JSON_TOOL`, that takes any object, and `tool_choice` forcing it — the way
instructor and LangChain ask Claude for JSON. The model's call of that tool is then the answer: its
arguments become the answer's text, and the turn ends as a plain answer does (`stop`), so the
client reads JSON where it asked for it. With tools of the client's own in the request, the tool is
offered beside them and any tool is required; a call of the client's tools goes back as the call it
is. The tool's name is reserved: upstream decoders turn a call of it into text wherever they meet
one (`TextFromCall` for streams, `text_from_calls` for whole answers).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import dataclasses

from proxy.ir import response as ir
from proxy.ir.events import BlockStart, BlockStop, Delta, Event, Finish
from proxy.ir.request import OutputPart, Request, TextPart, Tool, ToolCallPart, ToolChoice
from proxy.ir.response import Response

JSON_TOOL = "llm_proxy_json_answer"
DESCRIPTION = ("Give your answer with this tool: its input is the JSON object that answers the user's request, "
               "exactly as the user asked for it.")


def wants_json_tool(req: Request) -> bool:
    """Whether this request asks for any JSON object (no schema), which only a forced tool can carry
    to an upstream without a JSON mode."""
    return req.response_format is not None and req.response_format.type == "json_object"


def with_json_tool(req: Request) -> Request:
    """`req` with the JSON tool added and a tool call required: the tool itself when the client gave
    no tools, any tool when it did (unless it chose none)."""
    tools = [*req.tools, Tool(name=JSON_TOOL, description=DESCRIPTION, parameters={"type": "object"})]
    if req.tools and req.tool_choice is not None and req.tool_choice.mode == "none":
        return dataclasses.replace(req, response_format=None)  # no tool may be called: leave JSON to the prompt
    choice = ToolChoice(mode="required") if req.tools else ToolChoice(mode="tool", name=JSON_TOOL)
    return dataclasses.replace(req, tools=tools, tool_choice=choice, response_format=None)


def text_from_calls(response: Response) -> Response:
    """A whole answer with the JSON tool's call turned into its text."""
    if not any(isinstance(p, ToolCallPart) and p.name == JSON_TOOL for p in response.output):
        return response
    output: list[OutputPart] = [TextPart(p.arguments) if isinstance(p, ToolCallPart) and p.name == JSON_TOOL else p
                                for p in response.output]
    finish = response.finish_reason
    if finish == ir.TOOL_CALLS and not any(isinstance(p, ToolCallPart) for p in output):
        finish = ir.STOP
    return dataclasses.replace(response, output=output, finish_reason=finish)


class TextFromCall:
    """A stream filter: the JSON tool's call block becomes a text block (its argument deltas the
    text), and the turn it ends finishes as `stop` unless another tool was called."""

    __slots__ = ("_blocks", "_other_calls")

    def __init__(self) -> None:
        self._blocks: set[int] = set()  # keys of open blocks that are the JSON tool's call
        self._other_calls = False

    def feed(self, ev: Event) -> list[Event]:
        if isinstance(ev, BlockStart) and isinstance(ev.part, ToolCallPart):
            if ev.part.name != JSON_TOOL:
                self._other_calls = True
                return [ev]
            self._blocks.add(ev.block)
            return [BlockStart(TextPart(""), ev.block)]
        if isinstance(ev, BlockStop) and ev.block in self._blocks:
            self._blocks.discard(ev.block)
        elif isinstance(ev, Finish) and ev.reason == ir.TOOL_CALLS and not self._other_calls:
            return [Finish(ir.STOP, ev.stop_sequence)]
        return [ev] if not isinstance(ev, Delta) or ev.block not in self._blocks else [Delta(ev.text, ev.block)]
