"""What names a Gemini client's conversation for account affinity (proxy/relay/affinity.py): its
cachedContent, else the prefix each of its turns repeats."""

from __future__ import annotations

from proxy.protocols import registry

KEY = registry.get("gemini").client.affinity_key


def turn(*texts: str, system: str = "You are gemini-cli.") -> dict:
    return {"systemInstruction": {"parts": [{"text": system}]},
            "contents": [{"role": "user" if i % 2 == 0 else "model", "parts": [{"text": t}]} for i, t in enumerate(texts)]}


def test_the_turns_of_one_conversation_share_a_key_and_others_do_not() -> None:
    first, later = KEY(turn("fix the bug"), {}), KEY(turn("fix the bug", "on it", "thanks"), {})
    assert first is not None and first == later
    assert KEY(turn("another task"), {}) != first
    assert KEY(turn("fix the bug", system="another agent"), {}) != first


def test_a_cached_content_names_the_conversation_and_no_contents_names_none() -> None:
    assert KEY({**turn("x"), "cachedContent": "cachedContents/abc"}, {}) == "cachedContent:cachedContents/abc"
    assert KEY({"contents": []}, {}) is None
