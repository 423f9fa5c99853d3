"""The install's pepper (proxy/keys/pepper.py): the config's when set; else one file beside the state
file, owner-only, made once and read thereafter — by processes racing to make it too, which all end
up with the one pepper; else Redis's, the same for every host; else this process's own. And
gunicorn's master makes the file before it forks."""

from __future__ import annotations

import logging
import multiprocessing
import os
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config import ConfigError, parse
from proxy.config.state import StateConfig
from proxy.keys import pepper as pepper_module
from proxy.keys.pepper import PEPPER_BYTES, ensure_pepper_file, load_pepper, pepper_path
from proxy.serving import master
from proxy.state.redis_connection import connect
from tests.conftest import base_config

SQLITE = StateConfig()


def test_the_file_is_made_once_owner_only_and_read_thereafter(tmp_path: Path) -> None:
    state_path = str(tmp_path / "state.db")
    first = load_pepper(None, state_path, None, SQLITE)
    path = Path(pepper_path(state_path))
    assert path == tmp_path / "state.db.pepper"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert len(first) == PEPPER_BYTES and path.read_text() == first.hex() + "\n"
    assert load_pepper(None, state_path, None, SQLITE) == first
    ensure_pepper_file(state_path)  # the master's call on the next start: the file stands
    assert load_pepper(None, state_path, None, SQLITE) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db.pepper"]  # no temporary file left behind


def test_a_process_that_loses_the_race_keeps_the_winners_pepper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process links its file between this one's look and its link: this one's is dropped."""
    state_path = str(tmp_path / "state.db")
    ensure_pepper_file(state_path)
    winner = Path(pepper_path(state_path)).read_text()
    monkeypatch.setattr(pepper_module.os.path, "exists", lambda _: False)  # looked before the winner linked
    ensure_pepper_file(state_path)
    assert Path(pepper_path(state_path)).read_text() == winner
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db.pepper"]


def _load_at_once(state_path: str, start: Any, answers: Any) -> None:
    start.wait()
    answers.put(load_pepper(None, state_path, None, SQLITE).hex())


def test_processes_starting_together_get_one_pepper(tmp_path: Path) -> None:
    state_path = str(tmp_path / "state.db")
    context = multiprocessing.get_context("fork")
    start, answers = context.Barrier(8), context.Queue()
    processes = [context.Process(target=_load_at_once, args=(state_path, start, answers)) for _ in range(8)]
    for process in processes:
        process.start()
    got = [answers.get(timeout=30) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert len(set(got)) == 1
    assert Path(pepper_path(state_path)).read_text() == got[0] + "\n"


def test_the_configs_pepper_wins_and_writes_nothing(tmp_path: Path) -> None:
    state_path = str(tmp_path / "state.db")
    assert load_pepper("p" * 32 + "é", state_path, None, SQLITE) == ("p" * 32 + "é").encode()
    assert list(tmp_path.iterdir()) == []


def test_without_a_state_file_each_process_has_its_own() -> None:
    one, two = load_pepper(None, None, None, SQLITE), load_pepper(None, None, None, SQLITE)
    assert len(one) == len(two) == PEPPER_BYTES and one != two


def test_a_damaged_pepper_file_is_an_error_naming_the_key(tmp_path: Path) -> None:
    state_path = str(tmp_path / "state.db")
    Path(pepper_path(state_path)).write_text("not hex\n")
    with pytest.raises(ConfigError) as caught:
        load_pepper(None, state_path, None, SQLITE)
    assert caught.value.path == "keys.pepper" and "state.db.pepper" in caught.value.problem


def test_with_redis_every_host_gets_the_first_pepper_written(redis_url: str, tmp_path: Path) -> None:
    state = StateConfig(backend="redis", url=redis_url, prefix=f"t{uuid.uuid4().hex[:6]}:")
    host_a, host_b = connect(state), connect(state)
    try:
        first = load_pepper(None, str(tmp_path / "a.db"), host_a, state)
        assert load_pepper(None, str(tmp_path / "b.db"), host_b, state) == first
        assert host_a.get(state.prefix + "keys:pepper") == first.hex().encode()
        assert list(tmp_path.iterdir()) == []  # Redis's, not a file beside either host's state file
    finally:
        host_a.close()
        host_b.close()


ARBITER = SimpleNamespace(log=logging.getLogger("test.arbiter"))  # what the master uses of gunicorn's arbiter


def test_the_master_makes_the_file_before_it_forks_unless_the_config_has_one(tmp_path: Path) -> None:
    state_path = str(tmp_path / "state.db")
    master._prepare_state(ARBITER, parse(base_config("http://upstream.invalid/v1", state_path=state_path)))
    assert oct(os.stat(pepper_path(state_path)).st_mode & 0o777) == "0o600"
    other = str(tmp_path / "other.db")
    master._prepare_state(ARBITER, parse({**base_config("http://upstream.invalid/v1", state_path=other),
                                             "keys": {"pepper": "x" * 32}}))
    assert not os.path.exists(pepper_path(other))


def test_a_reload_cannot_change_the_pepper_and_never_quotes_it(tmp_path: Path) -> None:
    import yaml

    from proxy.serving.config_check import for_reload

    path = str(tmp_path / "config.yaml")
    current = parse({**base_config("http://upstream.invalid/v1", state_path=None), "keys": {"pepper": "a" * 32}})
    again = yaml.safe_dump({**base_config("http://upstream.invalid/v1", state_path=None),
                            "keys": {"pepper": "a" * 32, "prefix": "team-"}})
    assert for_reload(current, path, again).keys.prefix == "team-"  # the prefix of keys made from now on may change
    with pytest.raises(ConfigError) as caught:
        for_reload(current, path, yaml.safe_dump({**base_config("http://upstream.invalid/v1", state_path=None),
                                                  "keys": {"pepper": "b" * 32}}))
    assert str(caught.value).startswith("keys.pepper: cannot change on a reload")
    assert "a" * 32 not in str(caught.value) and "b" * 32 not in str(caught.value)


def test_with_redis_and_no_client_given_redis_is_still_asked(redis_url: str, tmp_path: Path) -> None:
    state = StateConfig(backend="redis", url=redis_url, prefix=f"t{uuid.uuid4().hex[:6]}:")
    client = connect(state)
    try:
        assert load_pepper(None, str(tmp_path / "a.db"), None, state) == load_pepper(None, None, client, state)
    finally:
        client.close()
