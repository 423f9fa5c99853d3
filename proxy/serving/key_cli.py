"""`llm-proxy keys …`: the key API from the command line, on the state store directly — for the
first key when no admin key exists yet, for scripts on the host, and while the server is down.

  llm-proxy keys create NAME [--models GLOB…] [--expires-at WHEN] --config FILE   (prints the secret once)
  llm-proxy keys list --config FILE
  llm-proxy keys rotate NAME [--grace SECONDS] --config FILE
  llm-proxy keys revoke NAME --config FILE
  llm-proxy keys disable|enable NAME --config FILE

The same operations as the admin API (proxy/keys/service.py), audited with the actor `cli`; a
running server sees each change within a second. Output is JSON (one object; `list`: one per
line), errors are one line on stderr and exit status 1 (2 for a bad config).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from proxy.config import Config
from proxy.errors import ProxyError
from proxy.keys.pepper import load_pepper
from proxy.keys.service import Context, KeyService
from proxy.state import schema

ACTIONS = ("create", "list", "rotate", "revoke", "disable", "enable")


def add_parser(sub: Any) -> None:
    keys = sub.add_parser("keys", help="issue, list, rotate, disable and revoke client keys on the state store")
    keys.add_argument("action", choices=ACTIONS)
    keys.add_argument("name", nargs="?", help="the key's name (all but list)")
    keys.add_argument("--config", required=True, help="YAML config file (its state: section says which store)")
    keys.add_argument("--models", nargs="+", default=None, help="create: globs of the models the key may use")
    keys.add_argument("--expires-at", default=None, help="create: when it stops (ISO 8601, or epoch seconds)")
    keys.add_argument("--grace", type=float, default=0.0, help="rotate: seconds the old secret keeps working")


def run(args: argparse.Namespace, config: Config) -> int:
    if args.action != "list" and not args.name:
        print(f"llm-proxy keys {args.action}: name the key", file=sys.stderr)
        return 2
    if config.state.backend == "sqlite" and not config.state_path:
        print("llm-proxy keys: state_path is null: keys would live in this command's memory alone; set state_path "
              "(or state.backend: redis)", file=sys.stderr)
        return 1
    if config.state_path and config.state.backend == "sqlite":
        try:
            schema.migrate(config.state_path)  # as a starting proxy would
        except schema.StateFileError as exc:
            print(f"llm-proxy keys: {exc}", file=sys.stderr)
            return 1
    from proxy.serving.state_backend import open_stores  # the stores: not for the master's imports

    store = open_stores(config).keys
    pepper = load_pepper(config.keys.pepper, config.state_path, getattr(store, "client", None), config.state)
    taken = (*(k.name for k in config.client_keys), *(k.name for k in config.admin_keys),
             *(g.name for g in config.key_groups))
    service = KeyService(store, pepper, config.keys.prefix, config.client_keys, taken,
                         group_names=tuple(g.name for g in config.key_groups))
    ctx = Context(actor="cli")
    try:
        if args.action == "list":
            for view in service.views():
                print(json.dumps(view))
            return 0
        answer: Any
        if args.action == "create":
            body: dict[str, Any] = {"name": args.name}
            if args.models:
                body["models"] = args.models
            if args.expires_at:
                body["expires_at"] = _when(args.expires_at)
            answer = service.create(ctx, body)[1]
        elif args.action == "rotate":
            answer = service.rotate(ctx, args.name, {"grace_seconds": args.grace})[1]
        elif args.action == "revoke":
            answer = service.revoke(ctx, args.name)
        else:
            answer = service.update(ctx, args.name, {"disabled": args.action == "disable"})
    except ProxyError as exc:
        print(f"llm-proxy keys {args.action}: {exc.info.message}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


def _when(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text
