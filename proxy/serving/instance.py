"""This running instance's own directory: made by gunicorn's master before any worker starts,
shared with its workers, removed when it stops.

    <run directory>/llm-proxy-<master pid>-<random>/     owner-only (0700)
        .lock      flock held by the master (and, inherited, its workers) while the instance runs
        metrics/   the workers' Prometheus files (prometheus-client's multiprocess mode,
                   proxy/serving/observability.py)
        config/    <generation>.yaml: the exact text of each config the master accepted, which the
                   workers load at a reload (proxy/serving/config_snapshots.py)

The run directory is `$LLM_PROXY_RUN_DIR` if set, else `/dev/shm` (memory) where it exists and is
writable, else the system's temporary directory — never the state file's directory: that disk may
fill up or turn read-only, and a worker writing its metrics into a full disk through a memory map
would be killed (SIGBUS), and scrapes and reloads with it. One directory per master process, so two
instances on one machine (gunicorn's USR2 upgrade runs the old and the new side by side) never mix
their figures; directories of instances that are gone (nobody holds their lock) are removed at
start. Workers find it through `$LLM_PROXY_INSTANCE_DIR`, set by the master before it forks.

Stdlib only: gunicorn's master imports it before gevent patches the standard library.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from dataclasses import dataclass

RUN_DIR_ENV = "LLM_PROXY_RUN_DIR"
INSTANCE_ENV = "LLM_PROXY_INSTANCE_DIR"
PREFIX = "llm-proxy-"
LOCK_FILE = ".lock"


@dataclass
class Instance:
    path: str
    lock_fd: int

    @property
    def metrics(self) -> str:
        return os.path.join(self.path, "metrics")

    @property
    def config(self) -> str:
        return os.path.join(self.path, "config")


def run_directory() -> str:
    chosen = os.environ.get(RUN_DIR_ENV)
    if chosen:
        return chosen
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def _lock(path: str) -> int | None:
    """An exclusive lock on `path`'s lock file, or None if a running instance holds it."""
    try:
        fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_stale(parent: str) -> list[str]:
    """Remove the directories of instances that are gone under `parent`; the ones removed."""
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            other = os.path.join(parent, name)
            if not name.startswith(PREFIX) or not os.path.isdir(other) or os.path.islink(other):
                continue
            fd = _lock(other)
            if fd is not None:  # its master is gone
                shutil.rmtree(other, ignore_errors=True)
                os.close(fd)
                removed.append(other)
    return removed


def create(pid: int) -> Instance:
    """This master's directory, empty and locked, with its `metrics/` and `config/`."""
    parent = run_directory()
    os.makedirs(parent, exist_ok=True)
    remove_stale(parent)
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-", dir=parent)  # 0700
    fd = _lock(path)
    assert fd is not None  # nobody else knows this directory yet
    instance = Instance(path, fd)
    os.makedirs(instance.metrics, mode=0o700)
    os.makedirs(instance.config, mode=0o700)
    os.environ[INSTANCE_ENV] = path
    return instance


def current() -> str | None:
    """In a worker (or the master): this instance's directory, if a master of ours made one."""
    return os.environ.get(INSTANCE_ENV)


def remove(instance: Instance) -> None:
    shutil.rmtree(instance.path, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.close(instance.lock_fd)
