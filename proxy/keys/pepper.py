"""The install's pepper: the secret every key digest is made with (HMAC-SHA256, proxy.keys.secrets),
so that a copy of the state store alone finds no key.

Owns where it comes from, one rule for every process of an install: the config's `keys.pepper` if
set; else, with `state.backend: redis`, one generated into the shared store (`SET <prefix>keys:pepper
NX`, then read: every host gets the first one written); else, with a `state_path`, a file beside it
(`<state_path>.pepper`, 32 random bytes as hex, owner-only), made once — by gunicorn's master
before it forks (proxy/serving/master.py calls `ensure_pepper_file`), and by whichever process
comes first otherwise; else (`state_path: null`) random, this process's alone, like its keys.
The file is written whole under a temporary name (O_CREAT|O_EXCL, mode 0600) and linked into
place, which fails if another process linked first: two processes never keep different peppers,
and nobody reads a half-written one. Stdlib and the config only: the master imports it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import Any

from proxy.config.state import StateConfig
from proxy.config.values import ConfigError
from proxy.state.redis_connection import connect, key

PEPPER_BYTES = 32


def pepper_path(state_path: str) -> str:
    return os.path.abspath(state_path) + ".pepper"


def ensure_pepper_file(state_path: str) -> None:
    """Create `<state_path>.pepper` if it does not exist; leave an existing one as it is."""
    path = pepper_path(state_path)
    if os.path.exists(path):
        return
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(secrets.token_hex(PEPPER_BYTES) + "\n")
            fh.flush()
            os.fsync(fh.fileno())  # never a linked pepper the disk lost: keys made with it would stop matching
        with contextlib.suppress(FileExistsError):  # another process was first: its pepper stands
            os.link(tmp, path)
    finally:
        os.unlink(tmp)


def load_pepper(keys_pepper_from_config: str | None, state_path: str | None, redis_client: Any,
                state_config: StateConfig) -> bytes:
    """The pepper, by the rule in this module's docstring. With backend redis, `redis_client` is
    asked (or, None, a client of its own made for the call). Redis' errors are raised."""
    if keys_pepper_from_config is not None:
        return keys_pepper_from_config.encode("utf-8")
    if state_config.backend == "redis":
        # never a file or memory instead: a pepper of this host's own would fail every other host's keys
        client = redis_client if redis_client is not None else connect(state_config)
        try:
            name = key(state_config, "keys", "pepper")
            client.set(name, secrets.token_hex(PEPPER_BYTES), nx=True)
            return _parse(client.get(name), f"Redis key {name}")
        finally:
            if client is not redis_client:
                client.close()
    if state_path:
        ensure_pepper_file(state_path)
        path = pepper_path(state_path)
        with open(path, encoding="ascii") as fh:
            return _parse(fh.read(), path)
    return secrets.token_bytes(PEPPER_BYTES)


def _parse(text: str | bytes | None, where: str) -> bytes:
    raw = text.decode("ascii", "replace") if isinstance(text, bytes) else (text or "")
    try:
        value = bytes.fromhex(raw.strip())
    except ValueError:
        value = b""
    if len(value) != PEPPER_BYTES:
        raise ConfigError("keys.pepper", f"{where} does not hold a pepper ({PEPPER_BYTES} bytes as hex): restore it "
                                         "from a backup — every runtime key was made with it — or set keys.pepper")
    return value
