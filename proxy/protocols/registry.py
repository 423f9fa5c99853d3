"""The protocols the proxy speaks, by name — the one place that lists them.

Owns the table from a protocol's name (and its deprecated aliases) to its `Protocol`, and what
the config needs from it: checking each upstream's `protocol:` value, turning an alias into the
name (with one deprecation line in the log), and importing the extra protocol packages a config
lists under `protocol_plugins` (each registers itself when imported). The four built-in
protocols are registered here; a fourth is a package that calls `register` — nothing else in the
proxy changes. Everything else looks protocols up here and nowhere else.
Pure: must not import Flask or requests.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from typing import Any

from proxy.config import Config, ConfigError
from proxy.ir.response import ErrorInfo
from proxy.protocols.codec import Protocol

log = logging.getLogger(__name__)

_PROTOCOLS: dict[str, Protocol] = {}
DEFAULT_ERRORS = "chat_completions"  # whose error envelope paths of no protocol answer in
_ALIASES: dict[str, str] = {}  # older config value → name
_BY_PATH: dict[str, Protocol | None] = {}  # what `for_path` found for a path: every answer asks it
_BY_PATH_MAX = 4096


def register(protocol: Protocol) -> None:
    """Make `protocol` known by its name and aliases (a later registration of a name replaces it)."""
    _BY_PATH.clear()
    _PROTOCOLS[protocol.name] = protocol
    for alias in protocol.aliases:
        _ALIASES[alias] = protocol.name


def get(name: str) -> Protocol:
    """The protocol called `name` — a name the config check has let through."""
    return _PROTOCOLS[name]


def canonical(name: str) -> str | None:
    """The protocol's name for `name`, which may be an alias; None when it is neither."""
    return name if name in _PROTOCOLS else _ALIASES.get(name)


def all_protocols() -> list[Protocol]:
    return list(_PROTOCOLS.values())


def for_path(path: str) -> Protocol | None:
    """The protocol whose client endpoint `path` is, or lies under (its error envelope applies) — or
    one of whose URL-addressed calls it is (Gemini's `/v1/models/{model}:generateContent`)."""
    if path in _BY_PATH:
        return _BY_PATH[path]
    found = _for_path(path)
    if len(_BY_PATH) < _BY_PATH_MAX:  # paths carry model names (Gemini's): keep a bounded number
        _BY_PATH[path] = found
    return found


def _for_path(path: str) -> Protocol | None:
    best: Protocol | None = None
    for protocol in _PROTOCOLS.values():
        if any(_rule_matches(rule, path) for rule in url_rules(protocol)):
            return protocol
    for protocol in _PROTOCOLS.values():
        base = protocol.client.path
        if (path == base or path.startswith(base + "/")) and (best is None or len(base) > len(best.client.path)):
            best = protocol
    return best


def url_rules(protocol: Protocol) -> list[str]:
    """The URL rules with a `<path:model>` part a protocol serves (its main calls and its endpoints')."""
    rules = [route.rule for route in protocol.client.url_routes]
    rules += [e.rule for e in protocol.endpoints] + list(protocol.embeddings.rules if protocol.embeddings else ())
    return [rule for rule in rules if "<path:model>" in rule]


def embeddings_for_path(path: str) -> Protocol | None:
    """The protocol one of whose embeddings endpoints `path` is (`/v1/embeddings`, Gemini's `:embedContent`)."""
    for protocol in _PROTOCOLS.values():
        rules = protocol.embeddings.rules if protocol.embeddings is not None else ()
        if any(rule == path or _rule_matches(rule, path) for rule in rules):
            return protocol
    return None


def _rule_matches(rule: str, path: str) -> bool:
    prefix, found, suffix = rule.partition("<path:model>")
    return bool(found) and len(path) > len(prefix) + len(suffix) and path.startswith(prefix) and path.endswith(suffix)


def error_body_for_path(path: str, info: ErrorInfo) -> dict[str, Any]:
    """An error in the envelope the clients of `path` parse: its protocol's, else the OpenAI one —
    the shape every SDK and tool expects from a path that belongs to no protocol (/v1/models)."""
    protocol = for_path(path) or _PROTOCOLS[DEFAULT_ERRORS]
    return protocol.client.error_body(info)


def resolve(config: Config) -> Config:
    """The config with every upstream's `protocol:` checked and spelled by its name: the plugin
    packages it lists are imported first; an alias is accepted with a deprecation line; an unknown
    value is a ConfigError naming the key."""
    for i, module in enumerate(config.protocol_plugins):
        try:
            importlib.import_module(module)
        except Exception as exc:  # any failure to import is the config's problem to report
            raise ConfigError(f"protocol_plugins[{i}]", f"cannot import {module!r}: {exc}") from None
    upstreams = []
    for i, upstream in enumerate(config.upstreams):
        name = upstream.protocol
        if name in _ALIASES:
            log.warning("upstreams[%d].protocol: %r is deprecated, write %r (same protocol)", i, name, _ALIASES[name])
            name = _ALIASES[name]
        if name not in _PROTOCOLS:
            known = ", ".join(sorted(_PROTOCOLS))
            raise ConfigError(f"upstreams[{i}].protocol", f"must be one of {known} (got {upstream.protocol!r})")
        upstreams.append(upstream if name == upstream.protocol else dataclasses.replace(upstream, protocol=name))
    return dataclasses.replace(config, upstreams=tuple(upstreams))


def _register_builtins() -> None:
    from proxy.protocols import chat_completions, gemini, messages, responses

    for protocol in (chat_completions.PROTOCOL, messages.PROTOCOL, responses.PROTOCOL, gemini.PROTOCOL):
        register(protocol)


_register_builtins()
