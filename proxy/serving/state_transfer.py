"""`llm-proxy state export FILE` / `llm-proxy state import FILE`: moving the shared state between
the SQLite backend and Redis (either way, or to a backup and back).

Owns the file format and the rules of a merge. The file is JSON lines: a header
`{"type": "llm-proxy-state", "format": 1, ...}`, then one line per account (its state, reason,
cooling deadline, balance, runtime overlay — a runtime-added account's config, key included — and
its counters), per outbound proxy state, per usage row (one minute and one combination of
dimensions, with its counters), and per recent-request entry, oldest first. It holds keys: it is
created readable by its owner only. Importing into a store that already holds state:

- an account's or proxy's *state* and the overlay replace what the store has for that account
  (the file is the newer word); accounts the file does not name are left alone;
- *counters* and *usage* rows are added to what is there (rows of the same minute and dimensions
  sum), so two hosts' exports can be merged into one store — and importing one file twice counts
  it twice;
- recent-request entries are appended (the list stays capped).

The Responses store is not moved: it is a cache of conversations with a TTL. Runs in the command's
own process, not under gunicorn: the stores are called directly (no gevent needed).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, fields
from typing import IO, Any

from proxy.config import Config, ConfigError
from proxy.ops.usage_store import (
    DIMENSIONS,
    RECENT_CAP,
    RecentEntry,
    UsageQuery,
    UsageRow,
    UsageStore,
    with_defaults,
)
from proxy.pool.store import AccountRecord, CounterDelta, ProxyRecord, StateStore
from proxy.serving.state_backend import open_stores
from proxy.state import schema
from proxy.state.health import StoreHealth

FORMAT = 1
_ACCOUNT_FIELDS = {f.name for f in fields(AccountRecord)} - {"version"}
_PROXY_FIELDS = {f.name for f in fields(ProxyRecord)} - {"version"}
_ROW_FIELDS = {f.name for f in fields(UsageRow)}
_RECENT_FIELDS = {f.name for f in fields(RecentEntry)}
FOREVER = 2 ** 40  # an `until` past any minute a store can hold


class TransferError(Exception):
    """What went wrong, phrased for the command line."""


def _stores(config: Config) -> tuple[StateStore, UsageStore, StoreHealth, str]:
    if config.state.backend == "sqlite" and not config.state_path:
        raise TransferError("state_path is null: this config keeps its state in each worker's memory, "
                            "so there is nothing to export or import")
    if config.state_path:  # brought to this version's schema first, as a starting proxy would
        try:
            schema.migrate(config.state_path)
        except schema.StateFileError as exc:
            raise TransferError(str(exc)) from None
    stores = open_stores(config)
    where = f"Redis at {config.state.shown_url}" if config.state.backend == "redis" else f"{config.state_path}"
    return stores.pool, stores.usage, stores.health, where


def _checked(health: StoreHealth, where: str) -> None:
    """The Redis stores degrade quietly for the service's sake; a migration must not."""
    if not health.up:
        raise TransferError(f"cannot reach {where}: {health.last_error}")


def export_state(config: Config, out: IO[str]) -> dict[str, int]:
    pool, usage, health, where = _stores(config)
    accounts = pool.load()
    _checked(health, where)
    proxies, _ = pool.proxy_changes_since(-1)
    answer = usage.query(UsageQuery(0, FOREVER, group_by=DIMENSIONS, bucket="minute"))
    recent = usage.recent(RECENT_CAP)
    _checked(health, where)
    out.write(json.dumps({"type": "llm-proxy-state", "format": FORMAT, "backend": config.state.backend,
                          "exported_at": time.time()}) + "\n")
    for record in accounts:
        out.write(json.dumps({"type": "account", **{k: v for k, v in asdict(record).items() if k in _ACCOUNT_FIELDS}})
                  + "\n")
    for proxy in proxies:
        out.write(json.dumps({"type": "proxy", **{k: v for k, v in asdict(proxy).items() if k in _PROXY_FIELDS}})
                  + "\n")
    for row in answer.rows:
        out.write(json.dumps({"type": "usage", "minute": row["time"],
                              **{k: v for k, v in row.items() if k in _ROW_FIELDS}}) + "\n")
    for entry in reversed(recent):  # oldest first, so an import appends them in order
        out.write(json.dumps({"type": "recent", **asdict(entry)}) + "\n")
    return {"accounts": len(accounts), "proxies": len(proxies), "usage rows": len(answer.rows),
            "requests": int(answer.totals["requests"]), "recent entries": len(recent)}


def _lines(source: IO[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(source, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise TransferError(f"line {number}: not JSON ({exc})") from None
        if not isinstance(item, dict) or "type" not in item:
            raise TransferError(f"line {number}: expected an object with a \"type\"")
        yield number, item


def import_state(config: Config, source: IO[str]) -> dict[str, int]:
    lines = _lines(source)
    first = next(lines, None)
    if first is None or first[1].get("type") != "llm-proxy-state":
        raise TransferError("not an llm-proxy state export (its first line must be the llm-proxy-state header)")
    if first[1].get("format") != FORMAT:
        raise TransferError(f"export format {first[1].get('format')!r} is not one this version reads ({FORMAT})")
    states, deltas, proxies, rows, recent = [], [], [], [], []
    for number, item in lines:
        kind = item.pop("type")
        try:
            if kind == "account":
                record = AccountRecord(**{k: v for k, v in item.items() if k in _ACCOUNT_FIELDS})
                states.append(record)
                deltas.append(CounterDelta(record.upstream, record.id, record.requests, dict(record.failures),
                                           record.tokens_in, record.tokens_out, record.last_used))
            elif kind == "proxy":
                proxies.append(ProxyRecord(**{k: v for k, v in item.items() if k in _PROXY_FIELDS}))
            elif kind == "usage":
                # An export from before the endpoint and served model were kept: their defaults.
                rows.append(with_defaults(UsageRow(**{k: v for k, v in item.items() if k in _ROW_FIELDS})))
            elif kind == "recent":
                recent.append(RecentEntry(**{k: v for k, v in item.items() if k in _RECENT_FIELDS}))
            else:
                raise TransferError(f"line {number}: unknown type {kind!r}")
        except TypeError as exc:
            raise TransferError(f"line {number}: a {kind} line is missing a field ({exc})") from None
    pool, usage, health, where = _stores(config)
    # Only what the file names: a state with no runtime config for an account the config file
    # does not list is kept and ignored by the pools, as the SQLite store does.
    pool.write([s for s in states if _has_state(s)], deltas, proxies)
    _checked(health, where)
    usage.add(rows, recent)
    _checked(health, where)
    return {"accounts": len(states), "proxies": len(proxies), "usage rows": len(rows),
            "requests": sum(r.requests for r in rows), "recent entries": len(recent)}


def _has_state(record: AccountRecord) -> bool:
    """Whether the record carries a state worth writing (a store that only ever counted an
    account keeps it `active` with no reason: writing that would only bump its version)."""
    return record.status != "active" or record.reason is not None or record.runtime is not None \
        or record.removed or record.balance is not None


def run(command: str, config: Config, path: str) -> int:
    """The command line's entry: 0 on success, 1 with one line on stderr otherwise."""
    try:
        if command == "export":
            if path == "-":
                done = export_state(config, sys.stdout)
            else:
                with os.fdopen(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600), "w") as out:
                    done = export_state(config, out)  # it holds runtime-added accounts' keys: owner only
        else:
            if path == "-":
                done = import_state(config, sys.stdin)
            else:
                with open(path) as source:
                    done = import_state(config, source)
    except (TransferError, ConfigError, OSError) as exc:
        print(f"llm-proxy state {command}: {exc}", file=sys.stderr)
        return 1
    figures = ", ".join(f"{n} {what}" for what, n in done.items())
    where = f"Redis at {config.state.shown_url}" if config.state.backend == "redis" else config.state_path
    print(f"llm-proxy state {command}: {figures} {'from' if command == 'export' else 'into'} {where}",
          file=sys.stderr)
    return 0
