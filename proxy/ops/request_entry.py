"""A request as the request log keeps it: `LoggedRequest`, made from a `RequestCapture` off the
request path, and its JSON form for the admin API and `llm-proxy requests export`.

Owns what is kept and what never is. Kept: the request's metadata (the recent-requests entry's
fields), the client's method, path, query and headers, each attempt (number, upstream, account,
model, URL, when it started, how long it took, status, failure class, action) and the four bodies —
each up to `max_body_bytes`, with its full size, its content type and, for a stream, when each
piece came (`chunks`: [milliseconds since arrival, where the piece ends in the kept bytes]).
Never kept: a key — the headers that carry one (`Authorization`, `x-api-key`, `x-goog-api-key`,
cookies, …) are replaced by `[redacted]`, a `key=` in the query too, and every known secret
(the accounts' keys, the config's client and admin keys, the key the client presented) is replaced
wherever it occurs in a body; then whatever `request_log.redact` names: JSON paths in JSON bodies
and in each `data:` line of a stream, regular expressions anywhere. A redaction may change a body's
length: its pieces' offsets then point into the redacted bytes, approximately.
Must not import Flask, requests or gevent.
"""

from __future__ import annotations

import base64
import json
import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from proxy.errors import redact_query_key
from proxy.ops.recent import entry_json, recent_entry
from proxy.ops.request_capture import BodyCopy, RequestCapture

REDACTED = "[redacted]"
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "x-goog-api-key", "api-key",
                            "cookie", "set-cookie"})
PARTS = ("client_request", "upstream_request", "upstream_response", "client_response")
TIMES = "#times"  # the part beside a stream's body holding when each piece came
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\*|\d+)\]")


@dataclass
class LoggedRequest:
    """One kept request: `meta` (JSON-able, every part described without its bytes) and the bytes
    of each part by name (`client_request`, `upstream_request:1`, `upstream_response:1`, …)."""

    request_id: str
    time: float
    client_key: str
    model: str
    status: int
    meta: dict[str, Any]
    parts: dict[str, bytes]

    _meta_json: bytes | None = field(default=None, repr=False, compare=False)

    def meta_json(self) -> bytes:
        if self._meta_json is None:
            self._meta_json = json.dumps(self.meta, separators=(",", ":")).encode()
        return self._meta_json

    @property
    def size(self) -> int:
        """What it takes to store: the bound `max_total_mb` counts."""
        return len(self.meta_json()) + sum(len(v) for v in self.parts.values())


class Redactor:
    """The secrets and the configured rules, applied to every stored body."""

    def __init__(self, rules: Iterable[str], secrets: Iterable[str]) -> None:
        self.paths = [_steps(r) for r in rules if r.startswith("$")]
        self.patterns = [re.compile(r.encode()) for r in rules if not r.startswith("$")]
        self.secrets = sorted({s.encode() for s in secrets if s}, key=len, reverse=True)

    def body(self, data: bytes, extra_secrets: Iterable[bytes] = ()) -> bytes:
        for secret in (*extra_secrets, *self.secrets):
            if secret and secret in data:
                data = data.replace(secret, REDACTED.encode())
        if self.paths:
            data = self._paths(data)
        for pattern in self.patterns:
            data = pattern.sub(REDACTED.encode(), data)
        return data

    def _paths(self, data: bytes) -> bytes:
        doc = _json(data)
        if doc is not None:
            return json.dumps(self._apply(doc)).encode() if self._matches(doc) else data
        if b"data:" not in data:
            return data
        lines = data.split(b"\n")
        for i, line in enumerate(lines):
            if line.startswith(b"data:"):
                payload = line[5:].strip()
                event = _json(payload)
                if event is not None and self._matches(event):
                    lines[i] = b"data: " + json.dumps(self._apply(event)).encode()
        return b"\n".join(lines)

    def _matches(self, doc: Any) -> bool:
        return any(_walk(doc, steps, replace=False) for steps in self.paths)

    def _apply(self, doc: Any) -> Any:
        for steps in self.paths:
            _walk(doc, steps, replace=True)
        return doc


def _steps(path: str) -> list[str | int | None]:
    """`$.a[*].b[0]` → ["a", None, "b", 0] (None: every element)."""
    steps: list[str | int | None] = []
    for name, index in _STEP.findall(path[1:]):
        steps.append(name if name else (None if index == "*" else int(index)))
    return steps


def _walk(node: Any, steps: list[str | int | None], replace: bool) -> bool:
    """Whether `steps` reach a value in `node`; with `replace`, each value reached becomes REDACTED."""
    if not steps:
        return True
    step, rest = steps[0], steps[1:]
    children: list[tuple[Any, Any]] = []
    if isinstance(step, str):
        if isinstance(node, dict) and step in node:
            children = [(node, step)]
    elif isinstance(node, list):
        children = [(node, i) for i in range(len(node))] if step is None else \
            ([(node, step)] if -len(node) <= step < len(node) else [])
    found = False
    for parent, at in children:
        if not rest:
            found = True
            if replace:
                parent[at] = REDACTED
        elif _walk(parent[at], rest, replace):
            found = True
    return found


def _json(data: bytes) -> Any:
    if data[:1] not in (b"{", b"["):
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def safe_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): (REDACTED if k.lower() in SECRET_HEADERS else v) for k, v in headers.items()}


def safe_query(query: str) -> str:
    return redact_query_key(query, REDACTED)


def logged_request(capture: RequestCapture, redactor: Redactor) -> LoggedRequest:
    """The entry the store keeps, made from a finished request's capture."""
    record = capture.record
    assert record is not None
    arrival = capture.arrival
    presented = (arrival.key.encode(),) if arrival.key else ()
    parts: dict[str, bytes] = {}

    def part(name: str, copy: BodyCopy, content_type: str) -> dict[str, Any] | None:
        if not copy.pieces and copy.size == 0:
            return None
        data = redactor.body(copy.data(), presented)
        parts[name] = data
        described: dict[str, Any] = {"part": name, "size": copy.size, "stored": len(data),
                                     "truncated": copy.size > copy.cap, "content_type": content_type}
        if copy.times is not None:
            # The pieces' times and ends, packed (8-byte floats, time then end): made into JSON only
            # when someone reads the request — a stream has one a chunk, and JSON for each costs more
            # than the rest of the entry.
            described["chunks"] = name + TIMES
            parts[name + TIMES] = array("d", copy.times).tobytes()
        return described

    request_body = capture.request_body
    client_request = BodyCopy(capture.cap)
    if request_body:
        client_request.whole(request_body)
    attempts = []
    for copy in capture.attempts:
        start = copy.start
        streamed = copy.response.times is not None
        attempts.append({
            "number": copy.number, "upstream": start.upstream if start else None,
            "account": start.account if start else None,
            "upstream_model": start.upstream_model if start else None,
            "url": (start.server.rstrip("/") + start.path) if start else None,
            "started_ms": round(copy.started_s * 1000, 3),
            "elapsed_ms": None if copy.elapsed_s is None else round(copy.elapsed_s * 1000, 3),
            "status": copy.status, "class": copy.klass, "action": copy.action,
            "request": part(f"upstream_request:{copy.number}", copy.request, "application/json"),
            "response": part(f"upstream_response:{copy.number}", copy.response,
                             "text/event-stream" if streamed else "application/json"),
        })
    meta = entry_json(recent_entry(record))
    meta.update({
        "logged_because": capture.logged_because,
        "client_request": {"method": arrival.method, "path": arrival.path, "query": safe_query(arrival.query),
                           "headers": safe_headers(dict(arrival.headers)),
                           "body": part("client_request", client_request,
                                        arrival.headers.get("content-type", "application/json"))},
        "attempts": attempts,
        "client_response": {"status": capture.client_status, "headers": safe_headers(capture.client_headers),
                            "body": part("client_response", capture.client, capture.client.content_type)},
    })
    return LoggedRequest(record.request_id, record.started, record.client_key, record.model, record.status,
                         meta, parts)


def detail_json(entry: LoggedRequest, with_bodies: bool) -> dict[str, Any]:
    """The entry for `GET /admin/requests/{id}` and the export: each part's bytes as `data` (UTF-8
    text, or base64 when it is not valid UTF-8) — or, without bodies (a viewer), every part None."""
    doc = json.loads(entry.meta_json())
    doc["has_body"] = True
    doc["bodies_withheld"] = not with_bodies

    def fill(described: dict[str, Any] | None) -> dict[str, Any] | None:
        if described is None or not with_bodies:
            return None
        data = entry.parts.get(described["part"], b"")
        try:
            described.update(encoding="utf-8", data=data.decode("utf-8"))
        except UnicodeDecodeError:
            described.update(encoding="base64", data=base64.b64encode(data).decode())
        described["chunks"] = chunks(entry.parts.get(described.get("chunks") or ""), len(data))
        return described

    doc["client_request"]["body"] = fill(doc["client_request"]["body"])
    doc["client_response"]["body"] = fill(doc["client_response"]["body"])
    for attempt in doc["attempts"]:
        attempt["request"], attempt["response"] = fill(attempt["request"]), fill(attempt["response"])
    return doc


def chunks(packed: bytes | None, length: int) -> list[list[float | int]] | None:
    """A stream part's pieces as [milliseconds since arrival, where the piece ends in the kept bytes]."""
    if not packed:
        return None
    values = array("d")
    values.frombytes(packed)
    return [[round(values[i] * 1000, 3), min(int(values[i + 1]), length)] for i in range(0, len(values), 2)]


def raw_part(entry: LoggedRequest, part: str, attempt: int | None) -> tuple[bytes, str] | None:
    """One part's bytes and content type (`?part=`): an upstream part of `attempt`, else of the last attempt."""
    if part in ("client_request", "client_response"):
        described = entry.meta[part]["body"]
    else:
        attempts = entry.meta["attempts"]
        chosen = [a for a in attempts if attempt is None or a["number"] == attempt]
        if not chosen:
            return None
        described = chosen[-1]["request" if part == "upstream_request" else "response"]
    if described is None:
        return None
    return entry.parts.get(described["part"], b""), described["content_type"] or "application/octet-stream"
