"""What costing adds to each request: the `Costing` hook (proxy/money/costing.py) that prices a
finished request, and the cost columns its usage row carries (a dimension and three counters more,
proxy/ops/usage_store.py), timed in-process under gevent as a gunicorn worker runs them.

    python bench/cost_overhead.py

  * the Costing hook alone, CPU µs per request: a model priced by genai-prices (a Claude model on
    an upstream whose provider is anthropic: tiers, cache classes), one priced by the config, and
    one with no price (the lookup that finds nothing) — each after the first lookup, which the
    price book caches per upstream, model and day;
  * the first lookup of a model (genai-prices' table loaded already) and loading the table itself,
    once per worker;
  * one usage row's commit to an SQLite state file, one request at a time, with the schema and
    statement as they were before costing (migration 2) and as they are now (migration 3): what the
    extra columns cost;
  * the whole accounting path a finished request takes (recent list + usage row, SQLite), with
    and without the Costing hook in front.

Prints medians of several runs. Not part of CI.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import sqlite3  # noqa: E402 - after patching, as in a gunicorn gevent worker
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.usage_overhead import record, sequential  # noqa: E402
from proxy.config import parse  # noqa: E402
from proxy.money import prices  # noqa: E402
from proxy.money.costing import Costing  # noqa: E402
from proxy.money.prices import PriceBook  # noqa: E402
from proxy.ops.hooks import HookSet  # noqa: E402
from proxy.ops.recent import RecentRequests  # noqa: E402
from proxy.ops.sqlite_usage_store import _ADD, SQLiteUsageStore  # noqa: E402
from proxy.ops.usage import UsageAccounting, usage_row  # noqa: E402
from proxy.ops.usage_writer import UsageWriter  # noqa: E402
from proxy.state import schema  # noqa: E402
from tests.state_files import open_state_file  # noqa: E402

RUNS = 5
CONFIG = {"client_keys": ["sk-bench"], "state_path": None,
          "pricing": {"models": {"house-*": {"input": 0.5, "output": 1.5, "cached_input": 0.05}}},
          "upstreams": [{"name": "main", "protocol": "messages", "base_url": "http://127.0.0.1:9/v1",
                         "provider": "anthropic", "accounts": [{"id": "a", "api_key": "sk-up"}]}]}
# The usage statement as it was before costing: nine dimensions, seven counters.
OLD_COLUMNS = ("minute, client_key, client_protocol, model, upstream_model, upstream, account, stream, outcome, "
               "status, requests, errors, input_tokens, output_tokens, cached_tokens, cache_write_tokens, "
               "reasoning_tokens, first_byte_ms_sum, first_byte_count, duration_ms_sum")
OLD_COUNTERS = OLD_COLUMNS.split(", ")[10:]
OLD_ADD = (f"INSERT INTO usage_minutes ({OLD_COLUMNS}) VALUES ({', '.join('?' * 20)}) "
           "ON CONFLICT (minute, client_key, client_protocol, model, upstream_model, upstream, account, stream, "
           "outcome, status) DO UPDATE SET " + ", ".join(f"{c} = {c} + excluded.{c}" for c in OLD_COUNTERS))


def median(runs: list[float]) -> float:
    return statistics.median(runs)


def hook_cpu(book: PriceBook, model: str, n: int = 20_000) -> float:
    """CPU µs per request of the Costing hook, the price cached."""
    hook = Costing(lambda: book)
    records = [record(i) for i in range(n)]
    for done in records:
        done.upstream_model = model
    hook.request_done(records[0])
    cpu = time.process_time()
    for done in records:
        hook.request_done(done)
    return (time.process_time() - cpu) / n * 1e6


def first_lookups() -> tuple[float, float]:
    """(ms to load genai-prices' table, ms for a model's first lookup)."""
    start = time.perf_counter()
    prices._genai().data_snapshot.get_snapshot()
    loaded = (time.perf_counter() - start) * 1000
    book = PriceBook(parse(CONFIG, environ={}))
    start = time.perf_counter()
    book.price("main", "claude-opus-4-1")
    return loaded, (time.perf_counter() - start) * 1000


def commits(old: bool, n: int = 2000) -> float:
    """CPU µs per request of one usage row's commit, one request at a time, old or new layout."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "state.db")
        if old:
            saved = schema.MIGRATIONS, schema.CURRENT_VERSION
            schema.MIGRATIONS, schema.CURRENT_VERSION = schema.MIGRATIONS[:2], 2
            try:
                schema.migrate(path)
            finally:
                schema.MIGRATIONS, schema.CURRENT_VERSION = saved
        else:
            schema.migrate(path)
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA synchronous=NORMAL")
        rows = []
        for i in range(n):
            row = usage_row(record(i))
            row.minute += 60 * i  # a row of its own each time: an insert, not an update
            values = row.values()
            rows.append(values[:10] + values[11:18] + values[21:] if old else values)
        statement = OLD_ADD if old else _ADD
        cpu = time.process_time()
        for values in rows:
            db.execute("BEGIN IMMEDIATE")
            db.execute(statement, values)
            db.execute("COMMIT")
        spent = (time.process_time() - cpu) / n * 1e6
        db.close()
        return spent


def with_and_without_costing(n: int = 2000, costing_first: bool = False) -> tuple[float, float]:
    """CPU µs per request of the accounting path (recent + usage, SQLite), without and with Costing
    (run in either order: alternated, so neither arm always runs on a warmer process)."""
    out = {}
    book = PriceBook(parse(CONFIG, environ={}))
    for costing in ((True, False) if costing_first else (False, True)):
        with tempfile.TemporaryDirectory() as tmp:
            store = SQLiteUsageStore(open_state_file(Path(tmp) / "state.db"))
            writer = UsageWriter(store, retention_days=90)
            hooks = HookSet([RecentRequests(writer), UsageAccounting(writer)])
            if costing:
                hooks.hooks.insert(0, Costing(lambda: book))
            records = [record(i) for i in range(n + 1)]
            for done in records:
                done.upstream_model = "claude-sonnet-4-5-20250929"
            hooks.request_done(records[0])
            cpu = time.process_time()
            for done in records[1:]:
                hooks.request_done(done)
            out[costing] = (time.process_time() - cpu) / n * 1e6
            store.close()
    return out[False], out[True]


def main() -> None:
    loaded, first = first_lookups()
    book = PriceBook(parse(CONFIG, environ={}))
    print("Costing hook, CPU µs per request (price cached), median of", RUNS, "runs:")
    for label, model in (("genai-prices (claude-sonnet-4-5-20250929, tiered)", "claude-sonnet-4-5-20250929"),
                         ("config price (house-model)", "house-model"), ("no price (mystery-model)", "mystery-model")):
        print(f"  {label:<52} {median([hook_cpu(book, model) for _ in range(RUNS)]):6.1f} µs")
    print(f"  genai-prices' table loaded once per worker: {loaded:.0f} ms; a model's first lookup: {first:.1f} ms")
    old = median([commits(True) for _ in range(RUNS)])
    new = median([commits(False) for _ in range(RUNS)])
    print(f"one usage row committed to SQLite, CPU µs per request: before costing {old:.1f}, with the cost columns "
          f"{new:.1f} ({new - old:+.1f})")
    pairs = [with_and_without_costing(costing_first=bool(i % 2)) for i in range(2 * RUNS)]
    without, with_ = median([p[0] for p in pairs]), median([p[1] for p in pairs])
    print(f"accounting path (recent + usage, SQLite), CPU µs per request: without Costing {without:.1f}, "
          f"with {with_:.1f} ({with_ - without:+.1f})")
    wall, cpu = sequential(SQLiteUsageStore(open_state_file(Path(tempfile.mkdtemp()) / "state.db")), 500)
    print(f"(for scale: usage accounting alone, one request at a time: {wall:.0f} µs wall, {cpu:.0f} µs CPU)")


if __name__ == "__main__":
    main()
