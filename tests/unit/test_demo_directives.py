"""The demo upstream's directives: which account a `status` fault hits, and a clear error for one
it cannot follow."""

from __future__ import annotations

import pytest

from proxy.demo.scenarios import DirectiveError, plan


def body(text: str) -> dict[str, object]:
    return {"model": "demo-model", "messages": [{"role": "user", "content": text}]}


def test_status_fails_the_first_account_tried_only_and_status_all_every_one() -> None:
    first = plan(body("hi [demo:status=429]"))
    assert first.status == 429 and first.headers == {"Retry-After": "10"}
    assert first.error is not None and first.error["error"]["code"] == "429"
    retried = plan(body("hi [demo:status=429]"), first_try=False)
    assert retried.status == 200 and retried.error is None
    assert plan(body("hi [demo:status-all=529]"), first_try=False).status == 529
    assert plan(body("hi [demo:status]")).status == 500 and plan(body("hi [demo:status=500]")).headers == {}


@pytest.mark.parametrize(("text", "message"), [
    ("[demo:words=abc]", "[demo:words=abc]: words takes a whole number, like =20"),
    ("[demo:words=-3]", "[demo:words=-3]: words takes a whole number, like =20"),
    ("[demo:pace=]", "[demo:pace=]: pace takes a number of milliseconds, like =2"),
    ("[demo:prefill=nan]", "[demo:prefill=nan]: prefill takes a number of seconds, like =2"),
    ("[demo:status=200]", "[demo:status=200]: status takes an HTTP error status from 400 to 599, like =429"),
    ("[demo:status-all=abc]", "[demo:status-all=abc]: status-all takes an HTTP error status from 400 to 599, "
                              "like =429"),
])
def test_a_value_the_directive_does_not_take_is_named(text: str, message: str) -> None:
    with pytest.raises(DirectiveError) as err:
        plan(body(f"hi {text}"))
    assert str(err.value) == message


def test_an_unknown_directive_lists_the_known_ones() -> None:
    with pytest.raises(DirectiveError) as err:
        plan(body("hi [demo:reasonig]"))
    assert str(err.value).startswith("[demo:reasonig] is not a demo directive; the known ones are cache, chain, cite, drop")


def test_valid_values_and_bare_directives_still_work() -> None:
    for text in ("[demo:words=3]", "[demo:pace=0]", "[demo:pace=2.5]", "[demo:chain]", "[demo:tool]",
                 "[demo:tool=bash]", "[demo:stop=END]", "[demo:words]", "[demo:reasoning]", "[demo:hang=0]"):
        assert plan(body(f"hi {text}")).status == 200, text
