"""The key service and the worker's directory below the HTTP edge, on a clock the test controls:
a created key matches at once and its secret is kept only as a digest; a rotation's old secret
works until its grace ends; an expired key stops matching; an Idempotency-Key returns the same
answer with the secret sealed in the store; bad fields are refused by name with nothing written;
a config key is only disabled at runtime; views never hold a secret or digest; the audit trail is
exact; the directory takes a new snapshot only when the store's version moved."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config.keys import ClientKey
from proxy.errors import ProxyError
from proxy.keys.directory import KeyDirectory
from proxy.keys.service import Context, KeyService
from proxy.keys.store import MemoryKeyStore

PEPPER = b"k" * 32
CTX = Context(actor="ops", request_id="req-1", client="127.0.0.1")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def parts(clock: Clock) -> tuple[KeyService, KeyDirectory, MemoryKeyStore]:
    store = MemoryKeyStore()
    config_key = ClientKey(name="team-a", key="sk-config-team-a-000")
    service = KeyService(store, PEPPER, "sk-", (config_key,), ("team-a",), clock)
    return service, KeyDirectory(store, PEPPER, clock), store


def test_a_created_key_matches_at_once_and_is_stored_only_as_a_digest(parts: Any) -> None:
    service, directory, store = parts
    status, answer = service.create(CTX, {"name": "ci", "models": ["gpt-*"], "metadata": {"run": 7}})
    secret = answer["secret"]
    assert status == 201 and secret.startswith("sk-") and len(secret) >= 40
    assert answer["key"]["hint"] == f"sk-…{secret[-4:]}" and answer["key"]["models"] == ["gpt-*"]
    entry = directory.match_client(secret)  # a miss asks the store: no refresh needed first
    assert entry is not None and entry.name == "ci" and entry.allows("gpt-4o") and not entry.allows("claude")
    stored = store.snapshot().keys["ci"]
    assert secret not in repr(stored) and stored.secrets[0].digest != secret
    assert secret not in repr(service.views()) and "digest" not in repr(service.views())


def test_a_rotation_keeps_the_old_secret_for_its_grace_only(parts: Any, clock: Clock) -> None:
    service, directory, _ = parts
    old = service.create(CTX, {"name": "rot"})[1]["secret"]
    new = service.rotate(CTX, "rot", {"grace_seconds": 60})[1]["secret"]
    directory.refresh()
    assert directory.match_client(old) is not None and directory.match_client(new) is not None
    clock.now += 60
    assert directory.match_client(old) is None and directory.match_client(new) is not None
    newest = service.rotate(CTX, "rot", {"grace_seconds": 0})[1]["secret"]
    directory.refresh()
    assert directory.match_client(new) is None and directory.match_client(newest) is not None


def test_an_expired_key_stops_matching(parts: Any, clock: Clock) -> None:
    service, directory, _ = parts
    secret = service.create(CTX, {"name": "brief", "expires_at": clock.now + 10})[1]["secret"]
    assert directory.match_client(secret) is not None
    clock.now += 10
    assert directory.match_client(secret) is None


def test_an_idempotency_key_gives_the_same_answer_and_seals_the_secret(parts: Any) -> None:
    service, _, store = parts
    first = service.create(CTX, {"name": "once"}, "idem-1")
    assert service.create(CTX, {"name": "once"}, "idem-1") == first
    kept = store.idempotent("ops", "idem-1", service.clock())
    assert kept is not None and first[1]["secret"].encode() not in kept.body_sealed
    with pytest.raises(ProxyError) as other:
        service.create(CTX, {"name": "twice"}, "idem-1")
    assert other.value.info.status == 422
    assert list(store.snapshot().keys) == ["once"]


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "x", "colour": "red"}, "colour"),
    ({"name": "has space"}, "name"),
    ({"name": "team-a"}, "name"),
    ({"name": "old", "expires_at": 1.0}, "expires_at"),
    ({"name": "bad", "expires_at": "next tuesday"}, "expires_at"),
    ({"name": "bad", "limits": {"tokens_per_day": -1}}, "limits"),
    ({"name": "bad", "budget": {"usd_per_day": "lots"}}, "budget"),
    ({"name": "bad", "metadata": ["not", "an", "object"]}, "metadata"),
])
def test_bad_fields_are_refused_by_name_and_nothing_is_written(parts: Any, body: dict[str, Any], field: str) -> None:
    service, _, store = parts
    with pytest.raises(ProxyError) as refused:
        service.create(CTX, body)
    assert (refused.value.info.status, refused.value.info.param) == (400, field)
    assert store.snapshot().version == 0 and store.audit() == []


def test_a_config_key_is_only_disabled_at_runtime_and_the_trail_is_exact(parts: Any) -> None:
    service, directory, store = parts
    with pytest.raises(ProxyError) as refused:
        service.update(CTX, "team-a", {"models": ["x"]})
    assert refused.value.info.param == "models"
    with pytest.raises(ProxyError):
        service.revoke(CTX, "team-a")
    service.update(CTX, "team-a", {"disabled": True})
    directory.refresh()
    assert directory.overlaid(ClientKey(name="team-a", key="k")).disabled
    secret = service.create(CTX, {"name": "gone"})[1]["secret"]
    service.revoke(CTX, "gone")
    assert [(e.action, e.target, e.actor, e.request_id) for e in store.audit()] == [
        ("key.revoke", "key:gone", "ops", "req-1"), ("key.create", "key:gone", "ops", "req-1"),
        ("key.disable", "key:team-a", "ops", "req-1")]
    assert secret not in repr(store.audit())


def test_the_directory_takes_a_snapshot_only_when_the_version_moved(parts: Any) -> None:
    service, directory, _ = parts
    assert directory.refresh() is True  # the first look
    assert directory.refresh() is False
    service.create(CTX, {"name": "new"})
    assert directory.refresh() is True and directory.entry("new") is not None


def test_admin_keys_made_at_runtime_and_the_last_admin_stays(parts: Any) -> None:
    from proxy.keys.admins import admin_views, create_admin, delete_admin

    service, directory, _ = parts
    config_admins = (ClientKey(name="auditor", key="sk-auditor-key-0000", role="viewer"),)
    made = create_admin(service, CTX, {"name": "ops", "role": "admin"})
    directory.refresh()
    found = directory.match_admin(made["secret"])
    assert found is not None and (found.name, found.role) == ("ops", "admin")
    assert [(v["name"], v["origin"], v["role"]) for v in admin_views(service, config_admins)] == [
        ("auditor", "config", "viewer"), ("ops", "runtime", "admin")]
    with pytest.raises(ProxyError) as last:
        delete_admin(service, CTX, "ops", config_admins)  # the config's only admin key is a viewer
    assert last.value.info.status == 400 and "last one with the admin role" in last.value.info.message
    create_admin(service, CTX, {"name": "ops2"})
    assert delete_admin(service, CTX, "ops", config_admins) == {"name": "ops", "deleted": True}
    with pytest.raises(ProxyError) as bad_role:
        create_admin(service, CTX, {"name": "x", "role": "root"})
    assert bad_role.value.info.param == "role"


def test_runtime_groups_and_memberships_make_the_effective_groups(parts: Any) -> None:
    from proxy.config import parse
    from proxy.keys.groups import create_group, effective

    service, directory, store = parts
    create_group(service, CTX, {"name": "eng", "keys": ["team-a"], "budget": {"usd_per_day": 5}})
    with pytest.raises(ProxyError) as unknown:
        service.create(CTX, {"name": "bot", "groups": ["nope"]})
    assert unknown.value.info.param == "groups"
    service.create(CTX, {"name": "bot", "groups": ["eng"]})
    config = parse({"client_keys": [{"name": "team-a", "key": "sk-config-team-a-000"}],
                    "upstreams": [{"name": "u", "protocol": "chat_completions", "base_url": "http://u.invalid/v1",
                                   "accounts": [{"id": "a", "api_key": "sk-a"}]}]})
    (eng,) = effective(config, store.snapshot())
    assert (eng.name, eng.keys, eng.budget is not None and eng.budget.usd_per_day) == ("eng", ("team-a", "bot"),
                                                                                       5_000_000)
    directory.refresh()
    assert directory.effective(config) is directory.effective(config)  # one object per config and snapshot
