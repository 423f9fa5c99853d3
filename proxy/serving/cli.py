"""The `llm-proxy` command: `serve`, `demo`, `check-config`, `prices`, `config-schema` and
`state migrate | check | export | import`, `keys …` and `requests export`.

Owns the command line: validating the config before anything starts (an invalid config exits
with status 2 and one line naming the key and the problem — no traceback), starting gunicorn
with the settings in `proxy.serving.settings`, and for `demo`, starting the simulated upstream beside
the proxy, with an admin key of its own, and printing how to talk to both. The startup summary
both commands print is `proxy.serving.master`'s, as for a plain gunicorn.

Import-light on purpose: this process becomes gunicorn's master, and the gevent workers it
forks must monkey-patch the standard library before Flask or requests are imported.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import textwrap
from typing import Any

from proxy import __version__
from proxy.config import Config, ConfigError, reference
from proxy.protocols import registry
from proxy.serving import key_cli, master, requests_cli
from proxy.serving.config_check import checked as load_checked
from proxy.serving.settings import settings as gunicorn_settings
from proxy.state import schema

DEMO_CLIENT_KEY = "sk-demo"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llm-proxy", description="Let any LLM client talk to any LLM backend.")
    parser.add_argument("--version", action="version", version=f"llm-proxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the proxy with gunicorn + gevent")
    serve.add_argument("--config", required=True, help="YAML config file")
    serve.add_argument("--bind", default=None, help="HOST:PORT to listen on (default 127.0.0.1:8080)")
    serve.add_argument("--workers", type=_at_least_one, default=None, help="gevent worker processes (default 1)")

    demo = sub.add_parser("demo", help="run the proxy in front of a built-in simulated upstream")
    demo.add_argument("--bind", default="127.0.0.1:8080", help="HOST:PORT for the proxy (default 127.0.0.1:8080)")
    names = [p.name for p in registry.all_protocols()]
    demo.add_argument("--upstream-protocol", choices=names + [a for p in registry.all_protocols() for a in p.aliases],
                      default=names[0], help=f"which protocol the simulated upstream is spoken to in: "
                                             f"{', '.join(names)} (default {names[0]})")

    check = sub.add_parser("check-config", help="validate a config file and exit")
    check.add_argument("config", help="YAML config file")

    prices = sub.add_parser("prices", help="per served model, the price in force and where it came from")
    prices.add_argument("--config", required=True, help="YAML config file")

    sub.add_parser("config-schema", help="print the config file's JSON Schema (for editors that validate YAML)")

    state = sub.add_parser("state", help="the state file's schema; moving state between SQLite and Redis")
    state.add_argument("action", choices=("migrate", "check", "export", "import"),
                       help="migrate: create the state file or bring it to this version's schema; check: say what "
                            "it is (version, journal mode, integrity); export: the config's store to FILE; "
                            "import: FILE into the config's store")
    state.add_argument("file", metavar="FILE", nargs="?", help="for export / import: a JSON lines file ('-' for "
                                                               "stdout / stdin)")
    state.add_argument("--config", required=True, help="YAML config file (its state: section says which store)")

    key_cli.add_parser(sub)
    requests_cli.add_parser(sub)

    args = parser.parse_args(argv)
    if args.command == "keys":
        config = _loaded(args.config)
        return 2 if config is None else key_cli.run(args, config)
    if args.command == "requests":
        config = _loaded(args.config)
        return 2 if config is None else requests_cli.run(args, config)
    if args.command == "check-config":
        return _check(args.config)
    if args.command == "prices":
        return _prices(args.config)
    if args.command == "config-schema":
        sys.stdout.write(reference.schema_text())
        return 0
    if args.command == "state":
        if args.action in ("export", "import") and args.file is None:
            parser.error(f"state {args.action} needs FILE (a JSON lines file, or - for standard "
                         f"{'output' if args.action == 'export' else 'input'})")
        return _state(args.action, args.file, args.config)
    if args.command == "serve":
        return _serve(args.config, args.bind, args.workers)
    return _demo(args.bind, args.upstream_protocol)


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value}): with no worker nothing would serve")
    return value


def _loaded(path: str) -> Config | None:
    """The checked config at `path`, or None once its error is printed (the command then exits 2)."""
    try:
        return load_checked(path)
    except ConfigError as exc:
        print(f"llm-proxy: config error: {exc}", file=sys.stderr)
        return None


def _state(action: str, path: str | None, config_path: str) -> int:
    config = _loaded(config_path)
    if config is None:
        return 2
    if action in ("migrate", "check"):
        return _schema(action, config.state_path)
    from proxy.serving import state_transfer  # the stores: not for the master's imports

    assert path is not None
    return state_transfer.run(action, config, path)


def _schema(action: str, state_path: str | None) -> int:
    """`state migrate`: what a starting proxy's master does to the file, now. `state check`: what
    the file is; exit status 1 if it needs anything."""
    if state_path is None:
        print(f"llm-proxy state {action}: state_path is null: this config keeps no state file", file=sys.stderr)
        return 1
    path = os.path.abspath(state_path)
    try:
        if action == "migrate":
            found, now = schema.migrate(path, on_wait=lambda waited: print(
                f"llm-proxy state migrate: {path} is locked by another process; waiting ({waited:.0f}s so far)",
                file=sys.stderr))
            done = f"schema version {found} → {now}" if found != now else f"already at schema version {now}"
            print(f"llm-proxy state migrate: {path}: {done}")
            return 0
        report = schema.check(path)
    except schema.StateFileError as exc:
        print(f"llm-proxy state {action}: {exc}", file=sys.stderr)
        return 1
    print(f"{path}: schema version {report.version} (this llm-proxy: {schema.CURRENT_VERSION}), journal mode "
          f"{report.journal_mode or '-'}, integrity {report.integrity}, {report.size_bytes} bytes")
    for problem in report.problems:
        print(f"llm-proxy state check: {problem}", file=sys.stderr)
    return 1 if report.problems else 0


def _check(path: str) -> int:
    config = _loaded(path)
    if config is None:
        return 2
    accounts = sum(len(u.accounts) for u in config.upstreams)
    print(f"{path}: OK ({len(config.upstreams)} upstream(s), {accounts} account(s))")
    for note in config.deprecated:
        print(f"llm-proxy: config warning: {note}", file=sys.stderr)
    return 0


def _prices(path: str) -> int:
    config = _loaded(path)
    if config is None:
        return 2
    from proxy.serving.price_list import listing  # genai-prices and the stores: not for the master's imports

    print(listing(config))
    return 0


def _serve(path: str, bind: str | None, workers: int | None) -> int:
    if _loaded(path) is None:
        return 2
    os.environ["LLM_PROXY_CONFIG"] = os.path.abspath(path)
    _run_gunicorn(gunicorn_settings(bind=bind, workers=workers))
    return 0


def _run_gunicorn(options: dict[str, Any]) -> None:
    from gunicorn.app.base import BaseApplication

    class ProxyServer(BaseApplication):
        def load_config(self) -> None:
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            # In the worker, after gevent has patched the stdlib. The app is built as proxy.wsgi
            # builds it for a gunicorn started by hand; importing that module from here would make
            # the command line depend on the entry point above it.
            from proxy.serving.app import create_app

            return create_app()

    ProxyServer().run()


def _demo(bind: str, upstream_protocol: str) -> int:
    upstream_protocol = registry.canonical(upstream_protocol) or upstream_protocol
    admin_key = "sk-demo-admin-" + secrets.token_hex(8)  # the admin API can change the pool: not a fixed key
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    upstream = subprocess.Popen(
        [sys.executable, "-m", "proxy.demo", "--fd", str(listener.fileno()), "--parent-pid", str(os.getpid())],
        pass_fds=[listener.fileno()],
    )
    listener.close()
    with tempfile.TemporaryDirectory(prefix="llm-proxy-demo-") as tmp:
        path = os.path.join(tmp, "demo.yaml")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(demo_config(f"http://127.0.0.1:{port}/v1", os.path.join(tmp, "state.db"), upstream_protocol,
                                 admin_key))
        os.environ["LLM_PROXY_CONFIG"] = path
        options = gunicorn_settings(bind=bind, workers=1)

        def when_ready(server: Any) -> None:
            # Printed once the socket is listening, so the instructions are true when they appear.
            master.when_ready(server)
            print(banner(bind, upstream_protocol, admin_key, f"http://127.0.0.1:{port}/v1"), flush=True)

        options["when_ready"] = when_ready
        try:
            _run_gunicorn(options)
        finally:
            upstream.terminate()
            upstream.wait(timeout=5)
    return 0


def demo_config(upstream_url: str, state_path: str, upstream_protocol: str,
                admin_key: str | None = None) -> str:
    admin = f"admin_keys: [{admin_key}]\n" if admin_key else ""
    return admin + textwrap.dedent(f"""\
        client_keys:
          # a small daily budget, to see one refuse: `[demo:output=4000]` with max_tokens 4000 costs $0.06
          - {{name: demo, key: {DEMO_CLIENT_KEY}, budget: {{usd_per_day: 0.25, alert_at: 0.8}}}}
        state_path: {state_path}
        # Demo prices (USD per million tokens), so /admin/usage and the status page show spend: the
        # simulated upstream is on loopback, so no provider's price list applies to it.
        pricing:
          models:
            demo-reasoner: {{input: 2, cached_input: 0.2, cache_write: 2.5, output: 8}}
            "*": {{input: 3, cached_input: 0.3, cache_write: 3.75, cache_write_1h: 6, output: 15}}
        upstreams:
          - name: demo
            protocol: {upstream_protocol}
            base_url: {upstream_url}
            accounts:
              - {{id: demo-1, api_key: sk-demo-upstream-1}}
              - {{id: demo-2, api_key: sk-demo-upstream-2}}
        """)


def banner(bind: str, upstream_protocol: str, admin_key: str = "",
           upstream_url: str = "") -> str:
    host, _, port = bind.rpartition(":")
    host = "127.0.0.1" if host in ("", "0.0.0.0") else host.strip("[]")
    root = f"http://{host}:{port}"
    kind = registry.get(upstream_protocol).title
    return textwrap.dedent(f"""\
        llm-proxy {__version__} demo: the proxy in front of a simulated {kind} upstream.

          Base URL:    {root}/v1
          Client key:  {DEMO_CLIENT_KEY}
          Models:      any name works (try demo-model); GET {root}/v1/models lists some
          Admin key:   {admin_key}
          Status page: {root}/admin/ (sign in with the admin key)
          Upstream:    {upstream_url} (simulated, two accounts: demo-1, demo-2)
                       run it alone: python -m proxy.demo --port 9000

        The pool's accounts, as the admin API shows them:

          curl {root}/admin/accounts -H 'Authorization: Bearer {admin_key}'

        curl (watch the answer arrive word by word):

          curl -N {root}/v1/chat/completions -H 'Authorization: Bearer {DEMO_CLIENT_KEY}' \\
            -H 'Content-Type: application/json' \\
            -d '{{"model": "demo-model", "stream": true, "messages": [{{"role": "user", "content": "Hello!"}}]}}'

        OpenAI SDK (pip install openai):

          from openai import OpenAI
          client = OpenAI(base_url="{root}/v1", api_key="{DEMO_CLIENT_KEY}")
          stream = client.chat.completions.create(model="demo-model", stream=True,
                                                  messages=[{{"role": "user", "content": "Hello!"}}])
          for chunk in stream:
              print(chunk.choices[0].delta.content or "", end="", flush=True)

        Anthropic SDK (pip install anthropic):

          from anthropic import Anthropic
          client = Anthropic(base_url="{root}", api_key="{DEMO_CLIENT_KEY}")
          with client.messages.stream(model="demo-model", max_tokens=512,
                                      messages=[{{"role": "user", "content": "Hello!"}}]) as stream:
              for text in stream.text_stream:
                  print(text, end="", flush=True)

        gemini-cli (npm install -g @google/gemini-cli; its settings: docs/clients/gemini.md):

          GOOGLE_GEMINI_BASE_URL={root} GEMINI_API_KEY={DEMO_CLIENT_KEY} gemini -m demo-model

        google-genai SDK (pip install google-genai):

          from google import genai
          client = genai.Client(api_key="{DEMO_CLIENT_KEY}", http_options={{"base_url": "{root}"}})
          print(client.models.generate_content(model="demo-model", contents="Hello!").text)

        Put [demo:reasoning], [demo:parallel] (with tools), [demo:length] or [demo:status=429] in a
        message to see reasoning, parallel tool calls, truncation, or an account failing over: the
        first account tried answers 429, cools for 10s, and the next one answers. Ctrl-C stops.
        """)


if __name__ == "__main__":
    sys.exit(main())
