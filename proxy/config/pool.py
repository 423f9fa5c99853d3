"""The `pool:` section of an upstream's config: selection policy, retries, failure rules, probes,
balance refresh and conversation affinity (see `proxy.pool`). Import-light, like `proxy.config`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from proxy.config.values import ConfigError, choice, int_, known, mapping, number, required, str_

# The one list of each: the selection policies `proxy.pool.selection` implements and the actions
# `proxy.pool.classify` can take (what each means is said there).
POLICIES = ("lru", "balance", "round_robin", "weighted")
ACTIONS = ("fail", "next", "cool", "disable")


@dataclass(frozen=True)
class RuleConfig:
    """One failure-classification rule: (status, body pattern) → (class, action)."""

    statuses: tuple[int, ...] | None  # None: any status
    match: str | None  # regular expression searched in the error body, case-insensitive
    klass: str
    action: str


@dataclass(frozen=True)
class ProbeConfig:
    """The cheap request that tells whether a disabled account works again."""

    method: str = "GET"
    path: str = "/models"
    interval: float = 30.0


@dataclass(frozen=True)
class BalanceConfig:
    """Where an account's balance is read: GET base_url + path, JSON field (dotted path)."""

    path: str
    field: str
    method: str = "GET"
    interval: float = 300.0


@dataclass(frozen=True)
class PoolConfig:
    policy: str = "lru"
    max_attempts: int = 10
    cooldown: float = 60.0  # seconds an exhausted account rests when the upstream does not say
    rules: tuple[RuleConfig, ...] = ()  # checked before the default classification
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    balance: BalanceConfig | None = None
    # Conversation affinity (proxy/pool/affinity.py): a conversation's next turn goes to the account
    # that served its previous one while it can serve, for that account's prompt cache.
    affinity: bool = True
    affinity_ttl: float = 3600.0  # seconds a conversation is remembered after its last turn
    affinity_header: str | None = None  # a client header naming the conversation, before the protocol's own


def parse_pool(raw: Any, path: str) -> PoolConfig:
    p = mapping(raw, path)
    known(p, path, {"policy", "max_attempts", "cooldown", "rules", "probe", "balance", "affinity", "affinity_ttl",
                    "affinity_header"})
    rules = p.get("rules", [])
    if not isinstance(rules, list):
        raise ConfigError(f"{path}.rules", "must be a list of {status, match, class, action} rules")
    probe = mapping(p.get("probe", {}), f"{path}.probe")
    known(probe, f"{path}.probe", {"method", "path", "interval"})
    balance_raw = p.get("balance")
    balance = None
    if balance_raw is not None:
        b = mapping(balance_raw, f"{path}.balance")
        known(b, f"{path}.balance", {"method", "path", "field", "interval"})
        balance = BalanceConfig(path=str_(required(b, "path", f"{path}.balance"), f"{path}.balance.path"),
                                field=str_(required(b, "field", f"{path}.balance"), f"{path}.balance.field"),
                                method=choice(b.get("method", "GET"), f"{path}.balance.method", ("GET", "POST")),
                                interval=number(b.get("interval", 300), f"{path}.balance.interval", minimum=0.05))
    return PoolConfig(
        policy=choice(p.get("policy", "lru"), f"{path}.policy", POLICIES),
        max_attempts=int_(p.get("max_attempts", 10), f"{path}.max_attempts", minimum=1),
        cooldown=number(p.get("cooldown", 60), f"{path}.cooldown", minimum=0),
        rules=tuple(_rule(r, f"{path}.rules[{i}]") for i, r in enumerate(rules)),
        probe=ProbeConfig(method=choice(probe.get("method", "GET"), f"{path}.probe.method", ("GET", "POST", "HEAD")),
                          path=str_(probe.get("path", "/models"), f"{path}.probe.path"),
                          interval=number(probe.get("interval", 30), f"{path}.probe.interval", minimum=0.05)),
        balance=balance,
        affinity=_on_off(p.get("affinity", True), f"{path}.affinity"),
        affinity_ttl=number(p.get("affinity_ttl", 3600), f"{path}.affinity_ttl", minimum=1),
        affinity_header=None if p.get("affinity_header") is None
        else _header_name(p["affinity_header"], f"{path}.affinity_header"),
    )


def _on_off(value: Any, path: str) -> bool:
    """`on` / `off` (YAML reads them as booleans), true / false."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("on", "off"):
        return value.lower() == "on"
    raise ConfigError(path, f"must be on or off (got {value!r})")


def _header_name(value: Any, path: str) -> str:
    name = str_(value, path)
    if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name):
        raise ConfigError(path, f"must be an HTTP header name such as X-Session-Id (got {name!r})")
    return name.lower()


def _rule(raw: Any, path: str) -> RuleConfig:
    r = mapping(raw, path)
    known(r, path, {"status", "match", "class", "action"})
    status = r.get("status")
    statuses = None if status is None else tuple(
        int_(s, f"{path}.status", minimum=100) for s in (status if isinstance(status, list) else [status]))
    match = r.get("match")
    if match is not None:
        match = str_(match, f"{path}.match")
        try:
            re.compile(match)
        except re.error as exc:
            raise ConfigError(f"{path}.match", f"is not a valid regular expression: {exc}") from None
    if statuses is None and match is None:
        raise ConfigError(path, "needs a status, a match pattern, or both")
    return RuleConfig(statuses=statuses, match=match, klass=str_(required(r, "class", path), f"{path}.class"),
                      action=choice(required(r, "action", path), f"{path}.action", ACTIONS))
