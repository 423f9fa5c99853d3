"""The configuration reference and the JSON Schema say what the loader does.

proxy/config/reference.py describes the config file once; the reference page and the schema are
made from that description. Here it is held to the loader itself: at every section the keys it lists
are exactly those the loader knows (read from the loader's own "unknown key; expected one of …"),
each default it states is the value the loader applies when the key is left out, an unknown key at
any depth is refused by both the schema and the loader, every example config of the guide (each
YAML block of config keys), of the tests and of the demo passes both, and the committed page and schema are what the module makes now.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.config import ConfigError, parse, reference
from proxy.serving.cli import demo_config
from tests.conftest import ROOT, base_config
from tests.unit.test_config import MINIMAL

REGENERATE = ("regenerate it: python -m proxy.config.reference --markdown > docs/configuration-reference.md; "
              "python -m proxy.config.reference --schema > docs/config.schema.json")
VALIDATOR = jsonschema.Draft202012Validator(reference.schema())

Doc = dict[str, Any]


def minimal() -> Doc:
    return copy.deepcopy(MINIMAL)


def upstream(doc: Doc) -> Doc:
    up: Doc = doc["upstreams"][0]
    return up


def named_key(doc: Doc) -> Doc:
    doc["client_keys"] = [{"name": "alice", "key": "sk-alice", "limits": {"max_concurrent": 1}}]
    entry: Doc = doc["client_keys"][0]
    return entry


def key_group(doc: Doc) -> Doc:
    named_key(doc)
    doc["key_groups"] = [{"name": "team", "keys": ["alice"]}]
    group: Doc = doc["key_groups"][0]
    return group


def on_redis(doc: Doc) -> Doc:
    doc["state"] = {"backend": "redis", "sentinel": {"hosts": ["127.0.0.1:26379"], "service_name": "main"}}
    return doc


# Each section of the spec, and where it sits in a config that is otherwise valid.
SECTIONS: dict[str, Callable[[Doc], Doc]] = {
    "": lambda d: d,
    "client_keys[]": named_key,
    "admin_keys[]": lambda d: d.setdefault("admin_keys", [{"name": "ops", "key": "sk-admin-ops-0123"}])[0],
    "client_keys[].limits": lambda d: named_key(d)["limits"],
    "upstreams[]": upstream,
    "upstreams[].accounts[]": lambda d: upstream(d)["accounts"][0],
    "upstreams[].models": lambda d: upstream(d).setdefault("models", {}),
    "upstreams[].timeouts": lambda d: upstream(d).setdefault("timeouts", {}),
    "upstreams[].reasoning": lambda d: upstream(d).setdefault("reasoning", {}),
    "upstreams[].pool": lambda d: upstream(d).setdefault("pool", {}),
    "upstreams[].pool.rules[]": lambda d: upstream(d).setdefault("pool", {}).setdefault(
        "rules", [{"status": 403, "class": "quota", "action": "cool"}])[0],
    "upstreams[].pool.probe": lambda d: upstream(d).setdefault("pool", {}).setdefault("probe", {}),
    "upstreams[].pool.balance": lambda d: upstream(d).setdefault("pool", {}).setdefault(
        "balance", {"path": "/credits", "field": "total"}),
    "timeouts": lambda d: d.setdefault("timeouts", {}),
    "streaming": lambda d: d.setdefault("streaming", {}),
    "response_store": lambda d: d.setdefault("response_store", {}),
    "compaction": lambda d: d.setdefault("compaction", {}),
    "state": lambda d: d.setdefault("state", {}),
    "state.sentinel": lambda d: on_redis(d)["state"]["sentinel"],
    "server": lambda d: d.setdefault("server", {}),
    # The loader checks the TLS files can be read, not that they hold a certificate: this file will do.
    "server.tls": lambda d: d.setdefault("server", {}).setdefault("tls", {"certfile": __file__, "keyfile": __file__}),
    "metrics": lambda d: d.setdefault("metrics", {}),
    "logging": lambda d: d.setdefault("logging", {}),
    "usage": lambda d: d.setdefault("usage", {}),
    "client_keys[].budget": lambda d: named_key(d).setdefault("budget", {"usd_per_day": 1}),
    "upstreams[].pricing": lambda d: upstream(d).setdefault("pricing", {}),
    "pricing": lambda d: d.setdefault("pricing", {}),
    "key_groups[]": lambda d: key_group(d),
    "key_groups[].budget": lambda d: key_group(d).setdefault("budget", {"usd_total": 5}),
    "alerts": lambda d: d.setdefault("alerts", {}),
    "keys": lambda d: d.setdefault("keys", {}),
    "audit": lambda d: d.setdefault("audit", {}),
    "request_log": lambda d: d.setdefault("request_log", {}),
    "tracing": lambda d: d.setdefault("tracing", {}),
}


def spec_sections(section: reference.Section = reference.SPEC, prefix: str = "") -> Iterator[tuple[str, Any]]:
    yield prefix.rstrip("."), section
    for key in section.keys:
        if isinstance(key.value, reference.Section):
            yield from spec_sections(key.value, prefix + key.name + ("[]" if key.listed else "") + ".")


SPEC_SECTIONS = dict(spec_sections())


def loader_keys(doc: Doc, target: Doc) -> tuple[str, set[str]]:
    """Where the loader refuses an unknown key put in `target`, and the keys it says it expected."""
    target["zz_not_a_key"] = 1
    with pytest.raises(ConfigError) as caught:
        parse(doc, environ={})
    expected = re.search(r"unknown key; expected one of (.*)$", caught.value.problem)
    assert expected, caught.value
    return caught.value.path, set(expected.group(1).split(", "))


def test_every_section_of_the_spec_is_tested() -> None:
    assert set(SPEC_SECTIONS) == set(SECTIONS)


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_the_spec_lists_exactly_the_keys_the_loader_knows(name: str) -> None:
    doc = minimal()
    target = SECTIONS[name](doc)
    parse(doc, environ={})  # valid before the unknown key goes in
    path, known = loader_keys(doc, target)
    assert path.endswith("zz_not_a_key")
    assert {k.name for k in SPEC_SECTIONS[name].keys} == known, f"{name or 'top level'}: the loader knows {sorted(known)}"


def spec_keys() -> Iterator[reference.Key]:
    for section in SPEC_SECTIONS.values():
        yield from section.keys


@pytest.mark.parametrize("key", [k for k in spec_keys() if k.applies], ids=lambda k: k.applies[0])
def test_each_stated_default_is_the_one_the_loader_applies(key: reference.Key) -> None:
    assert key.applies is not None
    where, value = key.applies
    node: Any = parse(minimal(), environ={})
    for part in where.split("."):
        node = node[int(part)] if part.isdigit() else getattr(node, part)
    assert node == value, f"{where}: the loader applies {node!r}, the reference says {value!r}"


def test_every_key_has_a_meaning_and_a_default() -> None:
    for path, kind, default, meaning in reference.rows():
        assert kind and default and len(meaning) > 10, path


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(SECTIONS)), st.from_regex(r"[a-z][a-z_]{0,14}", fullmatch=True))
def test_an_unknown_key_at_any_depth_is_refused_by_the_schema_and_the_loader(name: str, key: str) -> None:
    doc = minimal()
    target = SECTIONS[name](doc)
    if key in {k.name for k in SPEC_SECTIONS[name].keys}:
        return
    assert VALIDATOR.is_valid(doc), list(VALIDATOR.iter_errors(doc))
    target[key] = 1
    assert not VALIDATOR.is_valid(doc)
    with pytest.raises(ConfigError) as caught:
        parse(doc, environ={})
    assert caught.value.path.endswith(key)


class AnyEnvironment(Mapping[str, str]):
    """Every variable set, to something each key that reads one accepts."""

    def __getitem__(self, name: str) -> str:
        return "redis://127.0.0.1:6379/0" if "URL" in name else "x" * 40

    def get(self, name: str, default: Any = None) -> str:
        return self[name]

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


TOP_LEVEL = {key.name for key in reference.SPEC.keys}


def doc_examples() -> Iterator[tuple[str, Doc]]:
    """Each YAML block of the guide that is a config file or part of one (its keys are top-level keys of
    the config), the part completed with what a minimal config has that it does not."""
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for n, block in enumerate(re.findall(r"```ya?ml\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)):
            doc = yaml.safe_load(block)
            if isinstance(doc, dict) and doc and set(doc) <= TOP_LEVEL:
                yield f"{page.relative_to(ROOT)}#{n}", {**minimal(), **doc}


EXAMPLES = [
    *doc_examples(),
    ("tests/unit/test_config.py MINIMAL", MINIMAL),
    ("tests/conftest.py base_config", base_config("http://127.0.0.1:9000/v1")),
    *((f"llm-proxy demo --upstream-protocol {p}", yaml.safe_load(demo_config("http://127.0.0.1:9/v1", "s.db", p,
                                                                                "adm-1")))
      for p in ("chat_completions", "messages", "responses", "gemini")),
]


def test_the_guide_shows_configs() -> None:
    assert sum(1 for name, _ in EXAMPLES if name.startswith("docs")) >= 5


@pytest.mark.parametrize(("name", "doc"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_every_example_config_passes_the_schema_and_the_loader(name: str, doc: Doc) -> None:
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)]
    assert not errors, "\n".join(errors)
    doc = copy.deepcopy(doc)
    tls = doc.get("server", {}).get("tls")
    if isinstance(tls, dict):  # the guide names files on the reader's host; the loader wants files that exist
        tls.update({name: __file__ for name in ("certfile", "keyfile") if name in tls})
    parse(doc, environ=AnyEnvironment())


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(reference.schema())


def test_the_committed_reference_page_is_current() -> None:
    committed = (ROOT / "docs" / "configuration-reference.md").read_text(encoding="utf-8")
    assert committed == reference.markdown(), "docs/configuration-reference.md is stale; " + REGENERATE


def test_the_committed_schema_is_current() -> None:
    committed = (ROOT / "docs" / "config.schema.json").read_text(encoding="utf-8")
    assert committed == reference.schema_text(), "docs/config.schema.json is stale; " + REGENERATE


def test_llm_proxy_config_schema_prints_the_schema() -> None:
    out = subprocess.run([sys.executable, "-m", "proxy.serving.cli", "config-schema"], capture_output=True,
                         text=True, timeout=60, check=True, cwd=ROOT).stdout
    assert json.loads(out) == reference.schema()


def with_value(where: str, value: Any) -> Doc:
    """The minimal config with `value` at the dotted path `where` (digits index lists)."""
    doc = minimal()
    node: Any = doc
    parts = where.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[parts[-1]] = value
    return doc


# The forms a value may take: the schema and the loader must agree on each, accepted or refused.
FORMS: list[tuple[str, Any, bool]] = [
    ("client_keys", "sk-alone", True),
    ("client_keys", ["sk-a", {"name": "bob", "key": "sk-bob", "models": "gpt-*"}], True),
    ("client_keys", [{"name": "bob"}], False),
    ("client_keys", [{"name": "bob", "key": "sk-bob", "limits": {"per_hour": 3}}], False),
    ("admin_keys", "adm-1", True),
    ("proxies", "http://127.0.0.1:3128", True),
    ("proxies", ["http://127.0.0.1:3128", "socks5h://127.0.0.1:1080"], True),
    ("proxies", [], False),
    ("max_body_bytes", "32MiB", True),
    ("max_body_bytes", "${BODY:-1024}", True),
    ("timeouts.connect", "${CONNECT:-5}", True),
    ("timeouts.connect", True, False),
    ("log_level", "loud", False),
    ("state_path", None, True),
    ("state.backend", "mysql", False),
    ("upstreams.0.models.serve", "gpt-*", True),
    ("upstreams.0.models.aliases", {"any-name": "target"}, True),
    ("upstreams.0.headers", {"X-Anything": "v"}, True),
    ("upstreams.0.pool.affinity", "off", True),
    ("upstreams.0.pool.affinity", "maybe", False),
    ("upstreams.0.pool.policy", "random", False),
    ("upstreams.0.pool.rules", [{"status": [429, 402], "class": "x", "action": "cool"}], True),
    ("upstreams.0.pool.rules", [{"status": 403, "class": "x", "action": "explode"}], False),
    ("upstreams.0.reasoning.passback", False, True),
    ("upstreams.0.reasoning.passback", "sometimes", False),
    ("upstreams.0.unsupported", ["cache_control", "top_k"], True),
    ("upstreams.0.unsupported", ["model"], False),
    ("upstreams.0.max_tokens_field", "max_completion_tokens", True),
    ("upstreams.0.accounts", [], False),
    ("upstreams.0.accounts.0.proxy", "socks5://127.0.0.1:1080", True),
    ("upstreams.0.base_url", "ftp://example.com", False),
    ("compaction.key", "short", False),
    ("keys.prefix", "llm_", True),
    ("keys.prefix", "has space", False),
    ("keys.pepper", "short", False),
    ("keys.pepper", "p" * 32, True),
    ("logging.format", "json", True),
    ("usage.retention_days", 0, False),
]


@pytest.mark.parametrize(("where", "value", "accepted"), FORMS, ids=[f"{w}={v!r}" for w, v, _ in FORMS])
def test_the_schema_and_the_loader_agree_on_each_form(where: str, value: Any, accepted: bool) -> None:
    doc = with_value(where, value)
    assert VALIDATOR.is_valid(doc) is accepted, list(VALIDATOR.iter_errors(doc))
    try:
        parse(doc, environ={})
        loaded = True
    except ConfigError:
        loaded = False
    assert loaded is accepted
