"""The internal representation of an embeddings request and its answer, between any client's
embeddings codec and any upstream's (proxy.protocols.codec.EmbeddingsCodec).

Owns: `EmbeddingsRequest` (the inputs — texts, or token arrays —, the dimensions asked, the
encoding the client wants, its `user`), `EmbeddingsAnswer` (each vector kept as the raw text of
its numbers as the upstream wrote them, so no float is ever parsed and re-printed on its way to
the client), reading those raw numbers out of a JSON answer (`loads_raw`), writing a vector back
(`vector_json`, `vector_base64`: float32 little-endian, OpenAI's `encoding_format: base64`) and the
proxy's own estimate of the input tokens (`estimate_tokens`, with proxy.ir.tokens' heuristic).
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.ir.tokens import text_tokens

Input = str | tuple[int, ...]  # a text, or a token array


@dataclass(frozen=True)
class EmbeddingsRequest:
    inputs: tuple[Input, ...]
    dimensions: int | None = None
    encoding_format: str = "float"  # float | base64: what the client wants back
    user: str | None = None

    @property
    def has_tokens(self) -> bool:
        return any(not isinstance(i, str) for i in self.inputs)


@dataclass(frozen=True)
class EmbeddingsAnswer:
    vectors: tuple[tuple[str, ...], ...]  # each number as the upstream's JSON text ("0.0123", "-1e-05")
    prompt_tokens: int | None = None  # the upstream's count; None: it gives none


class RawNumber(str):
    """A JSON number kept as the text it was written as."""


def loads_raw(raw: bytes) -> Any:
    """JSON with every number a `RawNumber` (floats and integers alike: a vector may hold `0`)."""
    return json.loads(raw, parse_float=RawNumber, parse_int=RawNumber)


def as_int(value: Any) -> int | None:
    """A count read by `loads_raw` (or plain JSON) as an int; None if it is not a whole number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, RawNumber) and value.lstrip("-").isdigit():
        return int(value)
    return None


def vector_of(values: Any) -> tuple[str, ...]:
    """One vector read by `loads_raw`: its numbers' texts; ValueError if it is not a list of numbers."""
    if not isinstance(values, list) or not all(isinstance(v, RawNumber) for v in values):
        raise ValueError("an embedding is not a list of numbers")
    return tuple(values)


def vector_json(vector: tuple[str, ...]) -> str:
    """The vector as a JSON list, its numbers' texts as they came."""
    return "[" + ",".join(vector) + "]"


def vector_base64(vector: tuple[str, ...]) -> str:
    """The vector as OpenAI's base64: float32, little-endian, one after the other."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *map(float, vector))).decode("ascii")


def count_in(raw: bytes, read: Callable[[Any], int | None]) -> int | None:
    """The input tokens an answer's JSON body reports, by the protocol's `read`; None if it says none."""
    try:
        return read(json.loads(raw))
    except ValueError:
        return None


def estimate_tokens(req: EmbeddingsRequest) -> int:
    """The inputs' tokens as the proxy estimates them: a token array counts its length, a text the
    heuristic of proxy.ir.tokens (at least one token each)."""
    return sum(max(1, text_tokens(i) if isinstance(i, str) else len(i)) for i in req.inputs)
