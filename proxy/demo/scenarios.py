"""What the simulated OpenAI-compatible upstream answers, decided from the request alone.

Owns the demo's behaviour as a plan of steps — chunks to send, pauses, holds, a dropped
connection — so the server only executes it. By default the answer is text streamed word by
word with realistic pacing; with `tools` the model calls a tool (with arguments built from the
tool's JSON schema, so Codex's shell tool gets a harmless command: proxy/demo/tool_choice.py)
and, once the last message is the tool's result, answers in text. Directives in the last user message, written
`[demo:NAME]` or `[demo:NAME=VALUE]`, ask for the rest:

  reasoning         stream `reasoning_content` before the answer (also: reasoning_effort set,
                    or a model name containing "reason")
  tool / tool=NAME  call a tool (the named one, else a shell-like one, else the first)
  chain=N           N dependent tool calls, one per turn, then an answer quoting every output
                    (proxy/demo/tool_chain.py)
  require-reasoning answer 400 as DeepSeek's thinking mode does when an assistant tool-call message
                    comes back without its `reasoning_content` (also: a model name containing
                    "strict"); implies `reasoning`. Chat face only: the other faces keep
                    reasoning in their own protocol's tokens
  parallel          two tool calls;   interleave  two tool calls whose fragments alternate (the
                    Anthropic and Responses faces keep them interleaved, as some gateways do)
  empty             answer with no content at all (only the finish and the usage)
  cite              answer with a text that cites a web source (Chat `annotations`, Anthropic
                    `citations`, Responses `url_citation` annotations)
  length            stop early with finish_reason "length"
  stop=SEQ          stop early on stop sequence SEQ, reported as vLLM does (`stop_reason: SEQ`)
  words=N           answer length;    pace=MS     delay between chunks (default 30)
  status=CODE       fail with that HTTP status (400-599) and an OpenAI error body — on the first
                    account tried only (the first key seen with the request's X-Request-Id), so
                    the proxy's fail-over shows: its retry on the next account is answered; a 429
                    carries `Retry-After: 10`
  status-all=CODE   the same on every account tried
  fail-midstream    an error chunk after a few words, then the connection closes
  drop              close the connection mid-stream, without finish or [DONE]
  quirky            the compatible-server quirks the proxy normalises (see chat passthrough)
  usage-on-finish   usage on the finish chunk instead of its own chunk
  output=N          report N output tokens in the usage (no more than the request's max_tokens, and
                    DEMO_MAX_OUTPUT without one), the answer itself as usual: a costly request, to run
                    into a USD budget (the demo key's is small)
  prefill=S         wait S seconds before the first chunk;  pause=S  go silent S s after it
  hold              after the first chunk, wait until POST /_demo/release?request_id=… (tests)
  endless           keep streaming until the client goes away (tests)
  cache             model a prompt cache per account: the leading messages the account (API key)
                    has seen before are reported as `cached_tokens` (proxy/demo/prompt_cache.py);
                    the Messages face needs no directive: it caches what `cache_control` marks;
                    the Gemini face reports them as `cachedContentTokenCount`
  gemini-signatures the Gemini face's answers carry thought signatures (as Gemini 2.5 does);
  enforce-signatures  … and a request whose current turn lacks them, or carries forged ones or ones of
                    another model, gets Gemini 3's 400 (a "gemini-3*" model does both without a
                    directive): proxy/demo/gemini_signatures.py. The other faces ignore both
  hang / hang=S     accept the request and send nothing, not even a status line, until the client
                    goes away — or for S seconds, then answer: an upstream stuck before its headers
                    (`timeouts.first_byte`, `timeouts.first_byte_total`)
An unknown directive, or a value that is not what the directive takes (`[demo:words=abc]`), is a
`DirectiveError`, which the server answers with a 400 naming it.
Pure: must not import Flask, requests or gevent.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from proxy.demo import json_sample, tool_chain, tool_choice

_DIRECTIVE = re.compile(r"\[demo:([a-z-]+)(?:=([^\]]*))?\]")
DEFAULT_PACE_MS = 30.0
ANSWER = (
    "Hello from the llm-proxy demo upstream. Your request travelled through the proxy, which picked "
    "an account from its pool, translated the protocol where needed, and is now relaying this answer "
    "to you word by word, exactly as a real model would stream it."
)
THOUGHT = "The user wants an answer. I will think briefly and then reply clearly."


CITED_ANSWER = "The llm-proxy README says the demo upstream needs no API key."
CITED_SOURCE = {"url": "https://github.com/llm-proxy/llm-proxy#the-demo", "title": "llm-proxy README: The demo"}


def citation(text: str) -> dict[str, Any]:
    """The url_citation a Chat search model attaches to `text` (the demo cites its whole answer)."""
    return {"type": "url_citation", "url_citation": {**CITED_SOURCE, "start_index": 0, "end_index": len(text)}}


@dataclass
class Step:
    kind: str  # chunk | raw | sleep | hold | endless | drop
    payload: Any = None


@dataclass
class Plan:
    status: int = 200
    error: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)  # of an error answer
    steps: list[Step] = field(default_factory=list)
    body: dict[str, Any] | None = None  # the non-stream answer
    done: bool = True  # end with data: [DONE]


DEMO_MAX_OUTPUT = 4096  # the most output tokens the simulated model reports (`output=N`) without max_tokens


class DirectiveError(ValueError):
    """A directive the demo cannot follow; the message says which and what it takes."""


FLAGS = {"reasoning", "require-reasoning", "parallel", "interleave", "empty", "cite", "length", "fail-midstream",
         "drop", "quirky", "usage-on-finish", "hold", "endless", "cache", "gemini-signatures", "enforce-signatures"}
# name → (what its value must be, may it be left out)
VALUES = {"tool": ("text", True), "stop": ("text", True), "chain": ("count", True), "words": ("count", True),
          "output": ("count", False),
          "pace": ("number", False), "prefill": ("number", False), "pause": ("number", False),
          "hang": ("number", True), "status": ("status", True), "status-all": ("status", True)}
_TAKES = {"count": "a whole number, like =20", "number": "a number of {unit}, like =2",
          "status": "an HTTP error status from 400 to 599, like =429", "text": "a value after ="}


def directives(body: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for msg in body.get("messages") or []:
        if isinstance(msg, dict) and msg.get("role") in ("user", "system", "developer"):
            for name, value in _DIRECTIVE.findall(_text(msg.get("content"))):
                _check(name, value)
                found[name] = value
    return found


def _check(name: str, value: str) -> None:
    if name in FLAGS:
        return
    if name not in VALUES:
        raise DirectiveError(f"[demo:{name}] is not a demo directive; the known ones are "
                             f"{', '.join(sorted(FLAGS | set(VALUES)))} (proxy/demo/scenarios.py)")
    kind, optional = VALUES[name]
    if value == "" and optional:
        return
    if kind == "count":
        ok = value.isdigit()
    elif kind == "number":
        try:
            ok = math.isfinite(float(value)) and float(value) >= 0
        except ValueError:
            ok = False
    elif kind == "status":
        ok = value.isdigit() and 400 <= int(value) <= 599
    else:
        ok = value != ""
    if not ok:
        unit = "milliseconds" if name == "pace" else "seconds"
        raise DirectiveError(f"[demo:{name}={value}]: {name} takes {_TAKES[kind].format(unit=unit)}")


def hang_before_headers(body: dict[str, Any]) -> float | None:
    """Seconds to send nothing before the answer (`[demo:hang=S]`); inf for `[demo:hang]`, which
    waits for the client to go away; None to answer at once."""
    d = directives(body)
    if "hang" not in d:
        return None
    return float(d["hang"]) if d["hang"] else math.inf


def plan(body: dict[str, Any], chat_face: bool = True, first_try: bool = True) -> Plan:
    """`chat_face`: the request came to the Chat endpoint (the strict reasoning check applies).
    `first_try`: this is the first account the request was tried on (`status=CODE` fails only that)."""
    d = directives(body)
    failing = "status-all" if "status-all" in d else "status" if "status" in d and first_try else None
    if failing is not None:
        status = int(d[failing] or 500)
        return Plan(status=status, error={"error": {"message": f"demo upstream failure {status}",
                                                    "type": "demo_error", "param": None, "code": str(status)}},
                    headers={"Retry-After": "10"} if status == 429 else {})
    model = str(body.get("model") or "demo-model")
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    strict = chat_face and ("require-reasoning" in d or "strict" in model)
    refused = tool_chain.missing_reasoning(messages) if strict else None
    if refused is not None:
        return Plan(status=400, error=refused)
    chunker = _Chunker(model, quirky="quirky" in d)
    pace = float(d.get("pace", DEFAULT_PACE_MS)) / 1000.0
    # `tool_choice: "none"` (Chat, and the faces' translations of Anthropic's `{"type": "none"}`):
    # the real APIs then never call a tool, however the conversation asks for one.
    tools = [] if body.get("tool_choice") == "none" else [t for t in body.get("tools") or [] if isinstance(t, dict)]
    # Clients may append system reminders after the user's turn (Claude Code does): skip them.
    turns = [m for m in messages if m.get("role") not in ("system", "developer")]
    last = turns[-1] if turns else {}
    reasoning = strict or "reasoning" in d or bool(body.get("reasoning_effort")) or "reason" in model
    words_limit = int(d["words"]) if d.get("words") else None

    steps: list[Step] = []
    if "prefill" in d:
        steps.append(Step("sleep", float(d["prefill"])))
    steps.append(Step("chunk", chunker.chunk({"role": "assistant", "content": ""})))
    if "hold" in d:
        steps.append(Step("hold"))
    if "pause" in d:
        steps.append(Step("sleep", float(d["pause"])))
    if "endless" in d:
        steps.append(Step("endless", chunker))
        return Plan(steps=steps)

    calls: list[tuple[str, str]] = []
    prompt = _last_text(last.get("content"))
    thought = THOUGHT
    first_call = 0
    chain = int(d["chain"] or 0) if "chain" in d else 0
    if chain and tools:
        outputs = [_text(m.get("content")) for m in messages if m.get("role") == "tool"]
        first_call = len(outputs)
        picked = tool_choice.calls(tools, d, prompt)[:1] if len(outputs) < chain else []
        calls = [(name, json.dumps(tool_chain.depend(json.loads(args), tool_chain.next_value(outputs))))
                 for name, args in picked]
        thought = tool_chain.thought(len(outputs) + 1, chain, calls[0][0] if calls else None)
        text = "" if calls else tool_chain.final_answer(outputs)
    elif tools and last.get("role") != "tool" and tool_choice.wants_tool(body, tools, d, prompt):
        calls = tool_choice.calls(tools, d, prompt)
        text = ""
    elif last.get("role") == "tool":
        text = f"The tool returned: {_text(last.get('content'))[:200]}. That completes the task."
    elif "cite" in d:
        text = CITED_ANSWER
    else:
        text = ANSWER
    if not calls:  # asked for JSON (response_format): the answer is JSON, after tool results too
        text = json_sample.answer_for(body.get("response_format"), text) or text
    if "empty" in d:
        calls, text = [], ""  # an answer with no content at all: just the finish and the usage
    if reasoning:
        for word in _words(thought):
            steps += [Step("chunk", chunker.chunk({"reasoning_content": word})), Step("sleep", pace)]
    words = _words(text)
    finish = "tool_calls" if calls else "stop"
    if "length" in d:
        words, finish = words[:5], "length"
    elif "stop" in d:
        words = words[:6]
    elif words_limit is not None:
        words = (words * (words_limit // max(len(words), 1) + 1))[:words_limit]
    for i, word in enumerate(words):
        steps += [Step("chunk", chunker.chunk({"content": word})), Step("sleep", pace)]
        if i == 2 and "fail-midstream" in d:
            steps.append(Step("chunk", {"error": {"message": "demo upstream failed mid-stream",
                                                  "type": "server_error", "param": None, "code": None}}))
            steps.append(Step("drop"))
            return Plan(steps=steps, done=False)
        if i == 2 and "drop" in d:
            steps.append(Step("drop"))
            return Plan(steps=steps, done=False)
    annotations = [citation(text)] if "cite" in d and text == CITED_ANSWER and words == _words(text) else []
    if annotations:
        # As search models do: the sources of the text, in a delta after it, offsets in the content.
        steps.append(Step("chunk", chunker.chunk({"annotations": annotations})))
    steps += _tool_steps(calls, chunker, pace, interleave="interleave" in d, first_call=first_call)

    prompt_tokens, completion_tokens = _estimate_tokens(body), len(words) + 10 * len(calls)
    if "output" in d:  # as a model does, never more than the request's cap
        cap = body.get("max_tokens") or body.get("max_completion_tokens") or body.get("max_output_tokens")
        completion_tokens = min(int(d["output"]), int(cap) if cap else DEMO_MAX_OUTPUT)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": prompt_tokens + completion_tokens,
             "prompt_tokens_details": {"cached_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": 14 if reasoning else 0}}
    want_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    matched = d.get("stop") or None
    if "usage-on-finish" in d or chunker.quirky:
        steps.append(Step("chunk", chunker.chunk({}, finish, usage=usage, stop_reason=matched)))
    else:
        steps.append(Step("chunk", chunker.chunk({}, finish, stop_reason=matched)))
        if want_usage:
            steps.append(Step("chunk", chunker.usage_chunk(usage)))
    whole = _whole(model, text, calls, finish, usage, thought if reasoning else None, words, first_call)
    if annotations:
        whole["choices"][0]["message"]["annotations"] = annotations
    if matched:
        whole["choices"][0]["stop_reason"] = matched
    return Plan(steps=steps, body=whole, done=not chunker.quirky)


def _whole(model: str, text: str, calls: list[tuple[str, str]], finish: str, usage: dict[str, Any],
           reasoning: str | None, words: list[str], first_call: int = 0) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(words) or None}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": f"call_demo{first_call + i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)
        ]
    return {"id": "chatcmpl-demo" + uuid.uuid4().hex[:12], "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


class _Chunker:
    def __init__(self, model: str, quirky: bool) -> None:
        self.quirky = quirky
        self.model = "" if quirky else model
        self.id = f"stream:chat:{uuid.uuid4()}" if quirky else "chatcmpl-demo" + uuid.uuid4().hex[:12]
        self.created = int(time.time())
        self.call_ids: dict[int, str] = {}  # tool call index → id (the quirky dialect repeats it)

    def chunk(self, delta: dict[str, Any], finish: str | None = None, usage: Any = None,
              stop_reason: str | None = None) -> dict[str, Any]:
        if self.quirky:
            delta = {"role": "assistant", **delta}  # role repeated on every chunk
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if stop_reason is not None:
            choice["stop_reason"] = stop_reason
        chunk: dict[str, Any] = {
            "id": self.id, "object": "chat.completion" if self.quirky else "chat.completion.chunk",
            "created": self.created, "model": self.model, "choices": [choice],
        }
        if usage is not None:
            chunk["usage"] = usage
        return chunk

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": usage}

    def tool_delta(self, index: int, call_id: str | None, name: str | None, args: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"index": index, "function": {"arguments": args}}
        if call_id is not None:
            self.call_ids[index] = call_id
        if call_id is not None or self.quirky:
            entry["id"] = call_id or self.call_ids.get(index, f"call_demo{index}")
            entry["type"] = "function"
            entry["function"]["name"] = name or ""
        return self.chunk({"tool_calls": [entry]})


def _tool_steps(calls: list[tuple[str, str]], chunker: _Chunker, pace: float, interleave: bool,
                first_call: int = 0) -> list[Step]:
    """`first_call`: the number of the first call's id (a chain numbers its calls across turns: a
    client that sees an id again takes the call for one it already has)."""
    pieces = [[args[j:j + 8] for j in range(0, len(args), 8)] or [""] for _, args in calls]
    steps: list[Step] = []
    if interleave:
        for i, (name, _) in enumerate(calls):
            steps.append(Step("chunk", chunker.tool_delta(i, f"call_demo{first_call + i}", name, "")))
        for j in range(max((len(p) for p in pieces), default=0)):
            for i in range(len(calls)):
                if j < len(pieces[i]):
                    steps += [Step("chunk", chunker.tool_delta(i, None, None, pieces[i][j])), Step("sleep", pace)]
        return steps
    for i, (name, _) in enumerate(calls):
        steps.append(Step("chunk", chunker.tool_delta(i, f"call_demo{first_call + i}", name, "")))
        for piece in pieces[i]:
            steps += [Step("chunk", chunker.tool_delta(i, None, None, piece)), Step("sleep", pace)]
    return steps


def _words(text: str) -> list[str]:
    return [*[w + " " for w in text.split(" ")][:-1], text.split(" ")[-1]] if text else []


def _last_text(content: Any) -> str:
    """The user's own words: the last text block (clients put reminders and context before it)."""
    if isinstance(content, list):
        texts = [str(p.get("text", "")) for p in content
                 if isinstance(p, dict) and p.get("type") in ("text", "input_text")]
        return texts[-1] if texts else ""
    return _text(content)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _estimate_tokens(body: dict[str, Any]) -> int:
    return max(1, len(json.dumps(body.get("messages") or [])) // 4)
