"""The `Costing` hook (proxy/money/costing.py): the cost on the record, from the config's prices,
before any other hook; unknown prices and missing usage left None; the price book swapped by a
config reload."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.blueprints.state import app_state
from proxy.config.load import parse
from proxy.ir.response import Usage
from proxy.money.costing import Costing, price_record
from proxy.money.prices import PriceBook
from proxy.ops.hooks import Hooks, HookSet
from proxy.ops.records import RequestRecord
from proxy.ops.usage import usage_row
from proxy.serving.app import create_app
from tests.state_files import migrated
from tests.unit.test_config import MINIMAL

PRICES = {"models": {"house-*": {"input": 2, "output": 8, "cached_input": 0.5}}}


def doc(**extra: Any) -> dict[str, Any]:
    out = copy.deepcopy(MINIMAL)
    out.update(extra)
    return out


def record(model: str, usage: Usage | None) -> RequestRecord:
    return RequestRecord("r", "alice", "chat_completions", model, False, upstream="main", account="acct-1",
                         upstream_model=model, status=200, usage=usage)


def test_a_priced_request_gets_its_cost_saving_and_source() -> None:
    book = PriceBook(parse(doc(pricing=PRICES), environ={}))
    done = record("house-1", Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=400))
    price_record(done, book)
    # 600 uncached * 2 + 400 cached * 0.5 + 100 output * 8 micro-dollars
    assert (done.cost_micros, done.cache_saved_micros, done.price_source) == (2200, 600, "config")
    row = usage_row(done)
    assert (row.cost_micros, row.cost_unknown_requests, row.cache_saved_micros, row.price_version) == (
        2200, 0, 600, "config")


def test_an_unknown_price_is_none_never_zero_and_counts_as_unknown() -> None:
    book = PriceBook(parse(doc(pricing=PRICES), environ={}))  # a loopback upstream: config prices only
    done = record("mystery-1", Usage(input_tokens=10, output_tokens=1))
    price_record(done, book)
    assert (done.cost_micros, done.price_source) == (None, None)
    assert usage_row(done).cost_unknown_requests == 1


def test_no_usage_is_no_cost_and_not_unknown() -> None:
    book = PriceBook(parse(doc(pricing=PRICES), environ={}))
    for usage in (None, Usage()):
        done = record("house-1" if usage is None else "mystery-1", usage)
        price_record(done, book)
        assert done.cost_micros is None and usage_row(done).cost_unknown_requests == 0


class Seen(Hooks):
    def __init__(self) -> None:
        self.costs: list[int | None] = []

    def request_done(self, record: RequestRecord) -> None:
        self.costs.append(record.cost_micros)


def test_costing_is_the_first_hook_and_a_reload_swaps_the_prices(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.serving import config_snapshots, instance

    # An app no master of ours runs: the reload reads the file (whatever an earlier test left set).
    monkeypatch.setattr(instance, "current", lambda: None)
    monkeypatch.setattr(config_snapshots, "latest", lambda: None)
    path = tmp_path / "config.yaml"
    config = doc(pricing=PRICES, state_path=migrated(tmp_path / "state.db"))
    path.write_text(yaml.safe_dump(config))
    parsed = parse(config, environ={})
    object.__setattr__(parsed, "source", str(path))
    app = create_app(parsed, start_background=False)
    state = app_state(app)
    assert isinstance(state.hooks.hooks[0], Costing)
    seen = Seen()
    hooks = HookSet([state.hooks.hooks[0], seen])  # any hook after it reads the cost already set
    hooks.finish(record("house-1", Usage(input_tokens=1000, output_tokens=100)), 200, "ok")
    config["pricing"] = {"models": {"house-*": {"input": 1, "output": 1}}}
    path.write_text(yaml.safe_dump(config))
    assert state.reloader.reload()
    assert app_state(app).prices is not state.prices
    hooks.finish(record("house-1", Usage(input_tokens=1000, output_tokens=100)), 200, "ok")
    assert seen.costs == [2800, 1100]


# ------------------------------------------------------------ llm-proxy prices, the startup summary


def listed_config() -> Any:
    upstreams = [
        {"name": "oai", "protocol": "chat_completions", "base_url": "https://api.openai.com/v1",
         "models": {"serve": ["gpt-4o", "gpt-5*"], "aliases": {"fast": "gpt-4o-mini"}},
         "accounts": [{"id": "a", "api_key": "sk-1"}]},
        {"name": "ant", "protocol": "messages", "base_url": "http://127.0.0.1:9/v1", "provider": "anthropic",
         "models": {"serve": ["claude-opus-4-1"]}, "pricing": {"models": {"claude-opus-4-1": {"input": 10}}},
         "accounts": [{"id": "a", "api_key": "sk-1"}]},
        {"name": "house", "protocol": "chat_completions", "base_url": "http://10.0.0.5/v1",
         "models": {"serve": ["house-model", "mystery-model"]}, "accounts": [{"id": "a", "api_key": "sk-1"}]}]
    return parse(doc(upstreams=upstreams, pricing=PRICES, state_path=None), environ={})


def test_prices_lists_each_served_model_with_its_price_and_source() -> None:
    from proxy.money.prices import table_version
    from proxy.serving.price_list import listing

    text = listing(listed_config())
    rows = {tuple(line.split()[:2]): line for line in text.splitlines()[7:]}
    assert set(rows) == {("oai", "gpt-4o"), ("oai", "gpt-4o-mini"), ("ant", "claude-opus-4-1"),
                         ("house", "house-model"), ("house", "mystery-model")}  # literal names, aliases; no globs
    assert rows[("oai", "gpt-4o")].split()[2:] == ["2.5", "1.25", "2.5", "2.5", "10", *table_version().split()]
    assert rows[("ant", "claude-opus-4-1")].split()[2] == "10"  # the config's input, genai-prices' other classes
    assert rows[("ant", "claude-opus-4-1")].endswith(f"config + {table_version()}")
    assert rows[("house", "house-model")].split()[2:] == ["2", "0.5", "2", "2", "8", "config"]
    assert "unknown" in rows[("house", "mystery-model")]
    assert "  oai: openai (guessed from base_url)" in text and "  house: none: config prices only" in text


def test_the_startup_summary_names_each_upstreams_provider() -> None:
    from proxy.serving.summary import providers

    assert providers(listed_config()) == ("oai: openai (guessed from base_url); ant: anthropic; house: none: config "
                                          "prices only (llm-proxy prices --config FILE lists them)")


def test_an_upstream_on_a_private_address_is_priced_without_loading_genai_prices() -> None:
    """genai-prices knows no provider on a private address, so its table (0.2 s, and ssl) is not
    loaded for one; the startup summary's module never imports it (gunicorn's master runs it)."""
    import subprocess
    import sys

    code = ("import sys; from proxy.config.load import parse; from proxy.money.prices import PriceBook; "
            "import proxy.serving.summary; "
            f"book = PriceBook(parse({doc(pricing=PRICES)!r}, environ={{}})); book.warm(); "
            "assert book.price('main', 'house-1') is not None and book.price('main', 'other') is None; "
            "print('genai_prices' in sys.modules, 'ssl' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
