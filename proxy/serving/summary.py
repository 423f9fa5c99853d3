"""The startup summary `llm-proxy serve`, `llm-proxy demo` and a plain gunicorn print once the
proxy listens: what is served, from which file, with what state, and what is switched on.

Owns the wording and nothing else: given the config, the listening addresses, the worker count,
the control socket and the master's pid, it returns the text (or, for a JSON log, its fields).
Never shows a key — only how many.
Import-light (stdlib): it runs in gunicorn's master — so an upstream's provider guessed from its
base_url (which takes genai-prices, and with it ssl) is asked of a child process, and only for an
upstream with no `provider:` on a public address.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence

from proxy import __version__
from proxy.config import Config
from proxy.config.request_log import log_path
from proxy.money.prices import private_address  # stdlib only at import: genai-prices loads on first use


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def summary_fields(config: Config, listeners: Sequence[str], workers: int, control_socket: str | None,
                   pid: int) -> tuple[str, dict[str, str]]:
    """The headline and the summary's lines as (label, text) in the order they are printed."""
    root = listeners[0] if listeners else "?"
    upstreams = "; ".join(f"{u.name} ({u.protocol}, {_count(len(u.accounts), 'account')})" for u in config.upstreams)
    state = os.path.abspath(config.state_path) if config.state_path else "in memory (state_path: null)"
    if config.state.backend == "redis":  # shared by several hosts; the URL without its password
        state = f"redis {config.state.shown_url} (prefix {config.state.prefix!r})"
    if config.admin_keys:
        admin = f"on ({_count(len(config.admin_keys), 'admin key')}); status page {root}/admin/"
    else:
        admin = "off (list keys under admin_keys to turn it on)"
    # The metrics endpoint answers to an admin key unless the config makes it public.
    if not config.metrics.enabled:
        metrics = "off (metrics.enabled: false)"
    elif config.metrics.public:
        metrics = f"on at {root}/metrics, public (metrics.public)"
    elif config.admin_keys:
        metrics = f"on at {root}/metrics, with an admin key"
    else:
        metrics = "off (needs admin_keys, or metrics.public: true)"
    headline = f"llm-proxy {__version__} serving {', '.join(listeners) or '?'} (master pid {pid})"
    fields = {
        "workers": _count(workers, "gevent worker"),
        "config": os.path.abspath(config.source) if config.source != "<memory>" else config.source,
        "upstreams": upstreams,
        "clients": _count(len(config.client_keys), "client key"),
        "state": state,
        "control": control_socket or "off",
        "admin API": admin,
        "metrics": metrics,
        "health": f"{root}/healthz (alive), {root}/readyz (every upstream has an active account)",
        "reload": f"kill -HUP {pid}" + (", or POST /admin/reload" if config.admin_keys else ""),
        "prices": providers(config),
    }
    if config.request_log.enabled:
        fields["request log"] = request_log_line(config)
    if config.tracing.enabled:
        where = config.tracing.endpoint or "the OTEL_EXPORTER_OTLP_* variables (else http://localhost:4318)"
        fields["tracing"] = f"on, OTLP/HTTP to {where}, sample {config.tracing.sample:g}" + \
            (", GenAI metrics too" if config.tracing.metrics else "")
    return headline, fields


def request_log_line(config: Config) -> str:
    settings = config.request_log
    if config.state.backend == "redis":
        where = "Redis"
    elif config.state_path:
        where = os.path.abspath(log_path(config.state_path))
    else:
        where = "memory"
    return (f"on for keys {', '.join(settings.keys)}, sample {settings.sample:g} (failures: {settings.errors}); "
            f"{where}, {settings.max_total_mb:g} MiB, {settings.retention_hours:g} h")


def providers(config: Config) -> str:
    """Each upstream's provider — the price list its models are looked up in (proxy/money/prices.py):
    set in the config, guessed from its base_url, or none (config prices only)."""
    guessed = _guess([u.base_url for u in config.upstreams if u.provider is None and not private_address(u.base_url)])
    shown = []
    for upstream in config.upstreams:
        if upstream.provider is not None:
            shown.append(f"{upstream.name}: {upstream.provider}")
        elif guessed.get(upstream.base_url):
            shown.append(f"{upstream.name}: {guessed[upstream.base_url]} (guessed from base_url)")
        elif upstream.base_url in guessed or private_address(upstream.base_url):
            shown.append(f"{upstream.name}: none: config prices only")
        else:
            shown.append(f"{upstream.name}: guessed when first priced")
    return "; ".join(shown) + " (llm-proxy prices --config FILE lists them)"


def _guess(base_urls: list[str]) -> dict[str, str | None]:
    """genai-prices' provider for each URL, asked in a child process: genai-prices imports ssl and
    an HTTP client, which this process (gunicorn's master, before its gevent workers fork) must not."""
    if not base_urls:
        return {}
    code = ("import json, sys; from proxy.money.prices import guess_provider; "
            "print(json.dumps({u: guess_provider(u) for u in sys.argv[1:]}))")
    try:
        done = subprocess.run([sys.executable, "-c", code, *base_urls], capture_output=True, text=True, timeout=20,
                              check=True)
        found: dict[str, str | None] = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}
    return found


def summary(config: Config, listeners: Sequence[str], workers: int, control_socket: str | None, pid: int) -> str:
    """The summary as text: the headline, then one indented `label: text` line each."""
    headline, fields = summary_fields(config, listeners, workers, control_socket, pid)
    return "\n".join([headline, *(f"  {label + ':':<11} {text}" for label, text in fields.items())])
