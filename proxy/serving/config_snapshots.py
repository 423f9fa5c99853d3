"""The configs gunicorn's master accepted, kept as the exact text it checked, for its workers.

Owns how a reload reaches the workers without a second reading of the file. At a SIGHUP the master
reads the file once, checks that text (proxy.serving.config_check) and, if it is good, writes it
here as the next generation before telling the workers (SIGHUP to each): a worker loads the newest
generation, never the file — which may have been rewritten since, into something invalid or
merely different. So a storm of reloads, good files and bad alternating, cannot leave a worker on
a file the master refused or on an older good one; a bad file is one line in the master's log and
nothing in the workers'; and every worker's `generation` is the master's.

    <instance directory>/config/<generation>.yaml    owner-only; the newest KEEP are kept

The text is the file's own (its `${VAR}`s unexpanded: every worker has the master's environment).
Stdlib only: the master imports it.
"""

from __future__ import annotations

import contextlib
import os

from proxy.serving import instance

KEEP = 5  # generations kept: a worker that reads the newest never finds it gone


def _folder() -> str | None:
    path = instance.current()
    return os.path.join(path, "config") if path else None


def write(generation: int, text: str) -> None:
    """In the master: `text` as `generation`, written whole before any worker can see it."""
    folder = _folder()
    if folder is None:
        return
    final = os.path.join(folder, f"{generation}.yaml")
    partial = final + ".partial"
    with os.fdopen(os.open(partial, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600), "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(partial, final)  # atomic: a reader sees the whole text or no file
    for older in _generations(folder)[:-KEEP]:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(folder, f"{older}.yaml"))


def latest() -> tuple[int, str] | None:
    """In a worker: the newest generation the master accepted and its text; None when there is no
    instance directory (an app not run by our master) or no reload has been accepted yet."""
    folder = _folder()
    if folder is None:
        return None
    for _ in range(3):  # the newest is never removed (KEEP); a listing races only with a write
        found = _generations(folder)
        if not found:
            return None
        try:
            with open(os.path.join(folder, f"{found[-1]}.yaml"), encoding="utf-8") as fh:
                return found[-1], fh.read()
        except FileNotFoundError:
            continue
    return None


def _generations(folder: str) -> list[int]:
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(int(name[:-5]) for name in names if name.endswith(".yaml") and name[:-5].isdigit())
