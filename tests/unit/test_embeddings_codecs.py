"""The embeddings codecs without a server: OpenAI's request checks (a 400 naming the field) and the
input shapes it takes; the vectors kept as the upstream's number texts both ways; base64 as
float32 little-endian; Gemini's two calls, its passthrough mapping only the model, and a token
array refused for a Gemini upstream; an embeddings budget reserves input tokens only."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest

from proxy.errors import ProxyError
from proxy.ir.embeddings import EmbeddingsAnswer, EmbeddingsRequest, estimate_tokens
from proxy.protocols.chat_completions.embeddings import CODEC as OPENAI
from proxy.protocols.gemini.embeddings import CODEC as GEMINI


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": ""}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": ["a", {"t": 1}]}, "input[1]"),
    ({"model": "m", "input": [[1, 2], []]}, "input[1]"),
    ({"model": "m", "input": "a", "encoding_format": "int8"}, "encoding_format"),
    ({"model": "m", "input": "a", "dimensions": 0}, "dimensions"),
    ({"model": "m", "input": "a", "dimensions": True}, "dimensions"),
    ({"model": "m", "input": "a", "user": 3}, "user"),
])
def test_openai_requests_refused_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ProxyError) as refused:
        OPENAI.validate(body)
    assert refused.value.info.status == 400 and refused.value.info.param == param


def test_openai_input_shapes() -> None:
    assert OPENAI.decode({"model": "m", "input": "a"}).inputs == ("a",)
    assert OPENAI.decode({"model": "m", "input": [1, 2, 3]}).inputs == ((1, 2, 3),)
    assert OPENAI.decode({"model": "m", "input": ["a", [4, 5]]}).inputs == ("a", (4, 5))
    req = OPENAI.decode({"model": "m", "input": ["abcdefgh", [1, 2, 3]], "dimensions": 3, "encoding_format": "base64"})
    assert (req.dimensions, req.encoding_format, estimate_tokens(req)) == (3, "base64", 2 + 3)


def test_vectors_keep_the_upstreams_number_text() -> None:
    raw = b'{"data":[{"index":1,"embedding":[1e-05,0]},{"index":0,"embedding":[0.10000000,-2.5E3]}],' \
          b'"usage":{"prompt_tokens":7}}'
    answer = OPENAI.decode_answer(raw)
    assert answer == EmbeddingsAnswer((("0.10000000", "-2.5E3"), ("1e-05", "0")), 7)
    out = OPENAI.encode_answer(answer, {"encoding_format": "float"}, "client-model")
    assert b'"embedding":[0.10000000,-2.5E3]' in out and b'"embedding":[1e-05,0]' in out
    assert json.loads(out)["model"] == "client-model" and json.loads(out)["usage"]["prompt_tokens"] == 7
    packed = json.loads(OPENAI.encode_answer(answer, {"encoding_format": "base64"}, "m"))["data"][0]["embedding"]
    assert struct.unpack("<2f", base64.b64decode(packed)) == struct.unpack("<2f", struct.pack("<2f", 0.1, -2500.0))
    gemini = GEMINI.encode_answer(answer, GEMINI.body_from_url({"requests": []}, "g", "/x:batchEmbedContents"), "g")
    assert gemini == b'{"embeddings":[{"values":[0.10000000,-2.5E3]},{"values":[1e-05,0]}]}'


def test_gemini_upstream_calls() -> None:
    one = EmbeddingsRequest(("a",), dimensions=4)
    assert GEMINI.path_for(one, "g-1") == "/v1beta/models/g-1:embedContent"
    assert GEMINI.encode_request(one, "g-1") == {"model": "models/g-1", "content": {"parts": [{"text": "a"}]},
                                                 "outputDimensionality": 4}
    two = EmbeddingsRequest(("a", "b"))
    assert GEMINI.path_for(two, "g-1") == "/v1beta/models/g-1:batchEmbedContents"
    assert [r["content"]["parts"][0]["text"] for r in GEMINI.encode_request(two, "g-1")["requests"]] == ["a", "b"]
    with pytest.raises(ProxyError) as refused:
        GEMINI.encode_request(EmbeddingsRequest(("a", (1, 2))), "g-1")
    assert refused.value.info.status == 400 and "token array" in refused.value.info.message
    assert GEMINI.decode_answer(b'{"embedding":{"values":[0.50,1]}}') == EmbeddingsAnswer((("0.50", "1"),), None)


def test_gemini_clients_pass_through_with_only_the_model_mapped() -> None:
    body = GEMINI.body_from_url({"requests": [{"model": "models/alias", "content": {"parts": [{"text": "t"}]},
                                               "task_type": "RETRIEVAL_QUERY"}]}, "models/alias",
                                "/v1beta/models/<path:model>:batchEmbedContents")
    GEMINI.validate(body)
    assert GEMINI.model_of(body) == "alias"
    assert GEMINI.prepare(body, "real") == {"requests": [{"model": "models/real", "content": {"parts": [{"text": "t"}]},
                                                          "taskType": "RETRIEVAL_QUERY"}]}
    assert GEMINI.passthrough_path(body, "real") == "/v1beta/models/real:batchEmbedContents"
    single = GEMINI.body_from_url({"content": {"parts": [{"text": "t"}]}}, "alias", "/v1/models/<path:model>:embedContent")
    assert GEMINI.prepare(single, "real") == {"content": {"parts": [{"text": "t"}]}, "model": "models/real"}
    with pytest.raises(ProxyError) as refused:
        GEMINI.validate(GEMINI.body_from_url({"content": {"parts": [{"inlineData": {}}]}}, "g", "/x:embedContent"))
    assert refused.value.info.param == "content.parts[0]"
