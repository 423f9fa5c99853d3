"""Where the compaction key comes from: the config's `compaction.key`, else a key generated once
into the state directory and read by every worker and every restart after.

Owns that file: `compaction.key` beside `state_path`, readable by its owner only (it protects the
summaries of users' conversations). gunicorn's master creates it before it forks, beside the state
file's migration (proxy/serving/master.py), and every worker reads it (proxy/serving/app.py); it is
still created atomically (written to a temporary file, then linked into place, which fails if
another process was first, whose key is then read) for a proxy not started by our master. With
`state_path: null` the key lives in memory only — compaction items then do not survive a restart,
which is logged. Stdlib and the config only: the master imports it (its package brings the pure core).
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile

from proxy.config import Config

log = logging.getLogger("proxy.serving.compaction_key")  # its name before it moved: log lines unchanged

FILE_NAME = "compaction.key"


def compaction_secret(config: Config) -> str:
    if config.compaction.key is not None:
        return config.compaction.key
    if not config.state_path:
        log.warning("compaction.key is not set and state_path is null: the compaction key is in memory only, so "
                    "compaction items made now stop working after a restart (and differ between workers)")
        return secrets.token_urlsafe(32)
    path = os.path.join(os.path.dirname(os.path.abspath(config.state_path)), FILE_NAME)
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".compaction-key-")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:  # mkstemp makes it 0600
            fh.write(secrets.token_urlsafe(32) + "\n")
        try:
            os.link(tmp, path)
            log.info("generated the compaction key into %s", path)
        except FileExistsError:
            pass  # another worker was first: use its key
    finally:
        os.unlink(tmp)
    with open(path, encoding="ascii") as fh:
        return fh.read().strip()
