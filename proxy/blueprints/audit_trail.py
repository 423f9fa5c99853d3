"""The audit trail's entries for changes made through the admin API outside the key API (accounts,
reloads): who (the admin key's name), what, on what, before and after, the request id and the
caller's address — appended to the key store's audit log (proxy/keys/store.py), which
`GET /admin/audit` reads. The key API's own changes are written with the change itself
(proxy/keys/service.py). Views passed in must be public ones: never a key.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import g, request

from proxy.blueprints.state import app_state
from proxy.keys.model import AuditEntry, Change
from proxy.upstream.keeper import call_store

log = logging.getLogger("proxy.keys")


def audit(action: str, target: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    """Append one entry. A store that does not answer loses the entry, said in the log — the change
    it records is made already, and refusing it now would not undo it."""
    directory = app_state().keys
    if directory is None:
        return
    entry = AuditEntry(at=time.time(), actor=getattr(g, "client_key_name", "admin"), action=action, target=target,
                       before=before, after=after, request_id=getattr(g, "request_id", None),
                       client=request.remote_addr)
    try:
        call_store(directory.store, lambda: directory.store.commit(Change(), entry))
    except Exception as exc:
        log.warning("audit: could not record %s on %s (%s)", action, target, type(exc).__name__)
