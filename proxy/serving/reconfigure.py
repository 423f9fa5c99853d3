"""A config reload inside one worker: the new config's state built and swapped in, and requests
already running left on the state they started with.

Owns `Reloader`, one per app (`AppState.reloader`, proxy/blueprints/state.py):

- `reload()` — on the master's SIGHUP (proxy.serving.worker): the newest generation the master
  accepted (proxy.serving.config_snapshots: the text it checked, not the file, which may have
  changed since) — or, for an app no master of ours runs (a test's), the file read and checked
  here; then everything built from the config (`config_parts`, proxy/serving/parts.py: pools,
  router, relay, catalog, key checkers) built anew and the app's `AppState` replaced by a copy
  carrying them. What lives as long as the worker carries over — the hooks, the response store,
  the keeper and its store, and anything else on the state — and so do the pools of upstreams
  still configured, reconciled with the file in place (proxy.pool.membership), so leases out and
  `max_concurrency` stay right. A request reads the state once, when it starts: one in flight,
  a stream above all, finishes with the relay, routes and upstream settings it began with.
- `request()` — `POST /admin/reload`: the file checked here, in the worker that got the request
  (a ConfigError for a 400), then the master asked to reload (SIGHUP to it, as an operator would),
  which tells every worker; the answer waits, boundedly, until this worker has switched.

Reloads in a worker run one at a time, and a reload that finds nothing newer than the generation
the worker serves does nothing — so any number of SIGHUPs, in any order, leaves every worker on
the master's newest generation.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from typing import Any

from flask import Flask
from gevent.event import Event

from proxy import logs
from proxy.blueprints.state import AppState, app_state, install
from proxy.config import Config, ConfigError
from proxy.serving import config_check, config_snapshots, instance
from proxy.serving.parts import config_parts
from proxy.upstream.client import UpstreamClient

log = logging.getLogger("proxy.reload")

# How long POST /admin/reload waits for this worker to have switched before answering "accepted".
REQUEST_WAIT = 10.0


class Reloader:
    def __init__(self, app: Flask) -> None:
        self.app = app
        self.master_pid: int | None = None  # gunicorn's master, once a worker of ours runs the app
        self._lock = threading.Lock()  # greenlet-aware under gevent
        self._switched = Event()  # set, and replaced, each time this worker switches config

    def _state(self) -> AppState:
        return app_state(self.app)

    def check(self) -> Config:
        """The file, as a reload would take it; ConfigError if it would be refused."""
        state = self._state()
        if state.config_source is None:
            raise ConfigError("", "this proxy was not started from a config file, so there is none to reload")
        return config_check.for_reload(state.config, state.config_source)

    def reload(self) -> bool:
        """Switch to the master's newest generation (or, with no master of ours, to the file); False
        (and one log line) if nothing could be switched to."""
        with self._lock:
            state = self._state()
            accepted = config_snapshots.latest()
            if accepted is None and instance.current() is not None:
                return True  # under our master, which has accepted no reload yet
            try:
                if accepted is None:
                    config, generation = self.check(), state.config_generation + 1
                else:
                    generation, text = accepted
                    if generation <= state.config_generation:
                        return True  # already there: a SIGHUP for a generation this worker was built with
                    config = config_check.for_reload(state.config, state.config_source or "", text)
            except Exception as exc:  # an unreadable file is refused like an invalid one
                log.error("config reload refused in worker %d, still serving the previous config: %s",
                          os.getpid(), exc)
                return False
            try:
                install(self.app, self._rebuilt(state, config, generation))
            except Exception:
                log.exception("config reload failed, still serving the previous config")
                return False
            self._switched.set()
            self._switched = Event()
            new = self._state()
            accounts = sum(len(p.states()) for p in new.pools.values())
            log.info("config reloaded from %s in worker %d (generation %d): %d upstream(s), %d account(s)",
                     new.config_source, os.getpid(), new.config_generation, len(new.pools), accounts)
            return True

    def _rebuilt(self, state: AppState, config: Config, generation: int) -> AppState:
        client = state.client
        if config.trust_env != state.config.trust_env:
            client = UpstreamClient(trust_env=config.trust_env)  # requests in flight keep the old session
        parts = config_parts(config, state.keeper, client, state.hooks, reload=True,
                             affinity=state.relay.affinity)  # what conversations learnt outlives a reload
        logs.configure(config.log_level, config.logging.format)
        state.response_store.max_entries = config.response_store.max_entries
        state.response_store.ttl = config.response_store.ttl
        if state.usage is not None:
            state.usage.retention_s = config.usage.retention_days * 86400
        self.app.config["MAX_CONTENT_LENGTH"] = config.max_body_bytes
        return dataclasses.replace(state, **parts, client=client, config_loaded_at=time.time(),
                                   config_generation=generation)

    def request(self) -> dict[str, Any]:
        """POST /admin/reload: check the file (ConfigError if refused), have every worker reload,
        and say whether this one has switched."""
        before = self._state().config_generation
        try:
            self.check()
        except ConfigError as exc:
            log.error("config reload (POST /admin/reload) refused, still serving the previous config: %s", exc)
            raise
        if self.master_pid is None:  # not under gunicorn (an app built in a test): this app is all there is
            self.reload()
        else:
            switched = self._switched
            os.kill(self.master_pid, signal.SIGHUP)
            switched.wait(REQUEST_WAIT)  # the master's signal comes back to this worker within milliseconds
        state = self._state()
        return {"reloaded": state.config_generation != before, "generation": state.config_generation,
                "source": state.config_source, "loaded_at": state.config_loaded_at}
