"""The configuration: one YAML file → a validated, frozen `Config`.

A package of small modules, each with one owner: `model` (the dataclasses every other module
receives), `load` (reading the file, `${VAR}` expansion and every check, with messages that name the
key), `values` (checks on single values), `pool` (an upstream's `pool:` section), `presets`
(ready-made model tables), `unsupported` (an upstream's `unsupported:` list), `observability` (the
`metrics:` and `logging:` sections), `keys` (the `client_keys` entries: named, maybe restricted to
some models), `limits` (a client key's `limits:`), `state` (the `state:` section), `server` (the
`server:` section: trusted fronts, TLS), `usage` (the `usage:` section), `compaction` (the
`compaction:` key), `spec` (every key described once: type, default, meaning), `reference` (the
guide's configuration reference and the JSON Schema, made from `spec`). The names most code needs
are re-exported here.

Import-light (stdlib + PyYAML): `llm-proxy serve` and `check-config` import it in gunicorn's master
process, before the gevent worker monkey-patches the standard library.
"""

from proxy.config.keys import ClientKey
from proxy.config.load import load, parse, parse_account
from proxy.config.model import (
    Account,
    Config,
    ModelRules,
    ReasoningOptions,
    ResponseStoreConfig,
    Streaming,
    Timeouts,
    Upstream,
)
from proxy.config.values import ConfigError

__all__ = ["Account", "ClientKey", "Config", "ConfigError", "ModelRules", "ReasoningOptions", "ResponseStoreConfig",
           "Streaming", "Timeouts", "Upstream", "load", "parse", "parse_account"]
