"""The audit trail's entry for a config reload the master accepted (SIGHUP, or `POST /admin/reload`,
which signals the master too): actor `config-reload`, the file, the generation.

Written by gunicorn's master, which alone sees every reload once (workers each switch, so an entry
from them would come once per worker), on a store connection of its own, opened and closed for the
entry (proxy.serving.state_backend.one_store: nothing the master keeps open is inherited by the
workers it forks). A store that does not answer loses the entry, said in the master's log: the
reload is made already.
"""

from __future__ import annotations

import time
from typing import Any

from proxy.config import Config
from proxy.keys.model import AuditEntry, Change
from proxy.serving.state_backend import one_store


def record_reload(config: Config, path: str, generation: int, log: Any) -> None:
    if config.state.backend != "redis" and not config.state_path:
        return  # keys and their trail live in each worker's memory: nothing shared to write to
    entry = AuditEntry(at=time.time(), actor="config-reload", action="config.reload", target=f"config:{path}",
                       before=None, after={"generation": generation}, request_id=None, client=None)
    try:
        with one_store(config, "keys") as store:
            store.commit(Change(), entry)
    except Exception as exc:
        log.warning("audit: could not record the config reload (generation %d): %s: %s", generation,
                    type(exc).__name__, exc)
