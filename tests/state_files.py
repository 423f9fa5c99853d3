"""A state file for a test, as a worker opens it: migrated first (gunicorn's master does that
before any worker exists; proxy/state/schema.py), then opened (proxy/state/sqlite.py)."""

from __future__ import annotations

from pathlib import Path

from proxy.state import schema
from proxy.state.sqlite import StateFile


def migrated(path: str | Path) -> str:
    """`path`, created and migrated: ready for an app built in the test's own process."""
    schema.migrate(str(path))
    return str(path)


def open_state_file(path: str | Path) -> StateFile:
    return StateFile.open(migrated(path))
