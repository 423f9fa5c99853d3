"""The gunicorn worker class: gunicorn's gevent worker, plus a shutdown that ends streams properly
and a config reload that drops none; Responses WebSocket clients are sent elsewhere (close code
1001, going away).

On SIGTERM the gevent worker stops accepting and waits up to `graceful_timeout` for in-flight
requests; then gunicorn's master SIGKILLs it, and a stream still running would reach its client
as a cut connection with no terminator. This worker, shortly before that deadline, ends every
stream still running with the protocol's in-band error ("the proxy is shutting down … send the
request again") and its terminator, so clients see a clean, retryable failure instead.

On SIGHUP — sent by the master once it has validated a new config file (proxy.serving.master) —
the worker reloads the config in place (proxy.serving.reconfigure): new requests get the new
config, requests in flight finish on the old. gunicorn resets SIGHUP to its default (which would
kill the worker) in every worker, so this class installs its own handler. It is also the class
`proxy.serving.master` requires (`serves_llm_proxy`), and the one `proxy.wsgi` checks it runs under.

A worker whose app cannot be built never takes the server down for a passing reason: only a
configuration error (the same in every worker) exits with gunicorn's boot-error status, on which
the master stops; any other failure exits with 1 after a pause, and the master starts another.

Imported by gunicorn's master (as `worker_class`) before any monkey-patching, like gunicorn's own
`gunicorn.workers.ggevent`: it must not import the app at the top.
"""

from __future__ import annotations

import queue
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

import gevent
from gunicorn.workers.ggevent import GeventWorker

from proxy.config import ConfigError
from proxy.serving import instance
from proxy.serving.direct_write import attach_direct_writer
from proxy.state.schema import StateFileError

if TYPE_CHECKING:
    from proxy.blueprints.state import Reloading

# Streams are ended this long before the master's SIGKILL: the worker notices that its requests
# have drained once a second, and the last frames need a moment to be written.
END_STREAMS_BEFORE_DEADLINE = 1.5
BOOT_RETRY_PAUSE = 1.0  # seconds a worker that could not start waits before exiting to be replaced
WORKER_BOOT_ERROR = 3  # the exit status on which gunicorn's master stops the server


# Set in the worker process once this worker class runs it (checked by proxy.wsgi).
running = False


class ProxyGeventWorker(GeventWorker):
    serves_llm_proxy = True  # what proxy.serving.master checks gunicorn's worker class for
    _reload_pending = False

    def init_process(self) -> None:
        global running
        running = True
        super().init_process()

    def hold_reloads(self, arbiter: Any) -> None:
        """Just forked (gunicorn's post_fork): until this worker's own handler is in place, a SIGHUP
        must be neither lost nor fatal. One that came since the fork went to the copy of the
        master's signal queue this process inherited; from now until `init_signals` it waits,
        blocked. Either way the worker reloads once its app is built — it was forked with the
        config the master had accepted before that reload."""
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        while True:
            try:
                if arbiter.SIG_QUEUE.get_nowait() == signal.SIGHUP:
                    self._reload_pending = True
            except queue.Empty:
                break

    def init_signals(self) -> None:
        super().init_signals()
        signal.signal(signal.SIGHUP, self.handle_hup)
        signal.siginterrupt(signal.SIGHUP, False)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})  # one held since the fork arrives now

    def load_wsgi(self) -> None:
        try:
            super().load_wsgi()
        except SystemExit:
            raise
        except Exception as exc:
            self._could_not_boot(exc)
        # Streams write their frames below gunicorn's Response.write (proxy/serving/direct_write.py).
        # Flask's own middleware seam: self.wsgi stays the app (the reloader is found on it).
        app: Any = self.wsgi
        app.wsgi_app = attach_direct_writer(app.wsgi_app)
        reloader = self._reloader()
        if reloader is not None:
            reloader.master_pid = self.ppid  # /admin/reload asks the master, which tells every worker
            # A reload the master accepted while the app was being built (its SIGHUP held since the
            # fork, or not sent to this worker yet): catch up now; nothing newer, nothing done.
            if self._reload_pending or instance.current() is not None:
                gevent.spawn(reloader.reload)

    def _could_not_boot(self, exc: Exception) -> None:
        """The app could not be built. A configuration error — the same in every worker — stops the
        server, with one line naming it (gunicorn's master halts on a worker's exit status 3). Anything
        else (a lock held too long, Redis not answering in time, a file descriptor short) may pass:
        this worker exits with 1 after a pause, and the master starts another in its place — a
        transient failure never takes the host down."""
        if isinstance(exc, ConfigError) or (isinstance(exc, StateFileError) and exc.fatal):
            print(f"llm-proxy: config error: {exc}", file=sys.stderr, flush=True)
            sys.exit(WORKER_BOOT_ERROR)
        self.log.warning("worker %d could not start (%s: %s); exiting so that the master starts another in %gs",
                         self.pid, type(exc).__name__, exc, BOOT_RETRY_PAUSE, exc_info=exc)
        time.sleep(BOOT_RETRY_PAUSE)  # not a hot loop of forks while the cause lasts
        sys.exit(1)

    def handle_hup(self, sig: int, frame: Any) -> None:
        """Out of the signal handler: the reload blocks (the file, the store)."""
        if getattr(self, "wsgi", None) is None:
            # The app is still being built: the signal may have interrupted an import halfway (Flask's,
            # say), and importing anything now could find it half made and fail the worker's boot.
            # Noted instead; `load_wsgi` catches up once the app is built.
            self._reload_pending = True
            return
        reloader = self._reloader()
        if reloader is None:
            self._reload_pending = True
        else:
            gevent.spawn(reloader.reload)

    def _reloader(self) -> Reloading | None:
        """The app's reloader, once the app is built (None before)."""
        from proxy.blueprints.state import installed  # not at the top: the master imports this module

        state = installed(getattr(self, "wsgi", None))
        return state.reloader if state is not None else None

    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        """A stream's response headers and its first frame are two small writes; with Nagle's
        algorithm the second waits for the client to acknowledge the first."""
        if client.family in (socket.AF_INET, socket.AF_INET6):
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().handle(listener, client, addr)

    def handle_exit(self, sig: int, frame: Any) -> None:
        """SIGTERM, the graceful stop (SIGINT and SIGQUIT are gunicorn's quick stops)."""
        super().handle_exit(sig, frame)
        gevent.spawn(self._end_streams_before_deadline)
        gevent.spawn(self._close_sockets)

    def _close_sockets(self) -> None:
        """Responses WebSockets stay open between responses: told to go away now, their clients
        reconnect elsewhere instead of holding this worker until graceful_timeout."""
        from proxy.blueprints.responses_socket import close_all_sockets

        told = close_all_sockets()
        if told:
            self.log.info("closing %d websocket(s) with 1001 (going away)", told)

    def _end_streams_before_deadline(self) -> None:
        gevent.sleep(max(0.0, self.cfg.graceful_timeout - END_STREAMS_BEFORE_DEADLINE))
        from proxy.ir.response import ErrorInfo
        from proxy.streaming import end_all_streams

        info = ErrorInfo("unavailable", "The proxy is shutting down and could not finish this stream "
                                        "in time; send the request again.", 503)
        told = end_all_streams(info)
        if told:
            self.log.warning("graceful_timeout nearly over: ended %d stream(s) with an in-band error", told)
