"""`llm-proxy requests export --config FILE [--since T] [--until T] [--key GLOB]`: the request log's
entries as JSON lines on standard output, oldest first, each as `GET /admin/requests/{id}` gives it
to an admin key (bodies included).

Owns the command's arguments and reading the config's request log store — its SQLite file beside
the state file, or Redis with `state.backend: redis` — on connections of its own: a running proxy
is not needed and not disturbed. `since` / `until`: ISO 8601 or epoch seconds (`since` defaults to a
day before `until`, which defaults to now), as `/admin/usage` takes them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from fnmatch import fnmatchcase
from typing import Any

from proxy.config import Config
from proxy.errors import ProxyError

DEFAULT_WINDOW = 86400.0


def add_parser(sub: Any) -> None:
    requests = sub.add_parser("requests", help="the request log: export its entries as JSON lines")
    requests.add_argument("action", choices=("export",), help="export: every kept request in the window, oldest "
                                                              "first, one JSON object a line on standard output")
    requests.add_argument("--config", required=True, help="YAML config file (its request_log: and state: sections)")
    requests.add_argument("--since", help="ISO 8601 or epoch seconds (default: a day before --until)")
    requests.add_argument("--until", help="ISO 8601 or epoch seconds (default: now)")
    requests.add_argument("--key", help="only the requests of client keys whose name matches this glob")


def run(args: argparse.Namespace, config: Config) -> int:
    from proxy.ops.request_entry import detail_json  # the stores: not for the master's imports
    from proxy.ops.usage_query import parse_time
    from proxy.serving.state_backend import one_store

    if not config.request_log.enabled:
        print("llm-proxy requests export: request_log.enabled is false in this config: there is no request log "
              "to read", file=sys.stderr)
        return 1
    try:
        until = parse_time(args.until, "until") if args.until else time.time()
        since = parse_time(args.since, "since") if args.since else until - DEFAULT_WINDOW
    except ProxyError as exc:
        print(f"llm-proxy requests export: {exc.info.message}", file=sys.stderr)
        return 2
    count = 0
    with one_store(config, "requests") as store:
        for entry in store.between(since, until):
            if args.key and not fnmatchcase(entry.client_key, args.key):
                continue
            sys.stdout.write(json.dumps(detail_json(entry, with_bodies=True), ensure_ascii=False) + "\n")
            count += 1
    print(f"llm-proxy requests export: {count} request(s)", file=sys.stderr)
    return 0
