"""The registry's path lookup (`for_path`): which protocol's envelope a path answers in, the same
whether the answer is looked up or remembered, forgotten when a protocol is registered, and bounded
however many model names the paths carry."""

from __future__ import annotations

import dataclasses

from proxy.protocols import registry


def names(paths: list[str]) -> list[str | None]:
    return [p.name if p is not None else None for p in map(registry.for_path, paths)]


PATHS = ["/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
         "/v1/responses/resp_1/cancel", "/v1beta/models/gemini-2.5-pro:generateContent", "/v1/models",
         "/healthz"]


def test_a_path_answers_in_its_protocols_envelope_looked_up_or_remembered() -> None:
    registry._BY_PATH.clear()
    first = names(PATHS)
    assert first == ["chat_completions", "messages", "messages", "responses", "responses", "gemini", None, None]
    assert set(PATHS) <= set(registry._BY_PATH)  # remembered…
    assert names(PATHS) == first  # …and the same answer the second time


def test_registering_a_protocol_forgets_what_was_remembered() -> None:
    registry._BY_PATH.clear()
    chat = registry.get("chat_completions")
    assert names(["/v1/chat/completions", "/v1/chat/other"]) == ["chat_completions", None]
    moved = dataclasses.replace(chat, client=dataclasses.replace(chat.client, path="/v1/chat/other"))
    registry.register(moved)
    try:
        assert registry._BY_PATH == {}
        assert names(["/v1/chat/completions", "/v1/chat/other"]) == [None, "chat_completions"]
    finally:
        registry.register(chat)
    assert names(["/v1/chat/completions"]) == ["chat_completions"]


def test_paths_with_model_names_stay_bounded_and_answered() -> None:
    registry._BY_PATH.clear()
    paths = [f"/v1beta/models/m-{i}:generateContent" for i in range(registry._BY_PATH_MAX + 50)]
    assert set(names(paths)) == {"gemini"}
    assert len(registry._BY_PATH) == registry._BY_PATH_MAX
    assert names([paths[-1], "/v1/messages"]) == ["gemini", "messages"]  # past the bound: looked up
