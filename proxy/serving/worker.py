"""The gunicorn worker class: gunicorn's gevent worker, plus a shutdown that ends streams properly.

On SIGTERM the gevent worker stops accepting and waits up to `graceful_timeout` for in-flight
requests; then gunicorn's master SIGKILLs it, and a stream still running would reach its client
as a cut connection with no terminator. This worker, shortly before that deadline, ends every
stream still running with the protocol's in-band error ("the proxy is shutting down … send the
request again") and its terminator, so clients see a clean, retryable failure instead.

Imported by gunicorn's master (as `worker_class`) before any monkey-patching, like gunicorn's own
`gunicorn.workers.ggevent`: it must not import the app at the top.
"""

from __future__ import annotations

import socket
from typing import Any

import gevent
from gunicorn.workers.ggevent import GeventWorker

from proxy.serving.direct_write import attach_direct_writer

# Streams are ended this long before the master's SIGKILL: the worker notices that its requests
# have drained once a second, and the last frames need a moment to be written.
END_STREAMS_BEFORE_DEADLINE = 1.5


class ProxyGeventWorker(GeventWorker):
    def load_wsgi(self) -> None:
        """Streams write their frames below gunicorn's Response.write (proxy/serving/direct_write.py)."""
        super().load_wsgi()
        self.wsgi = attach_direct_writer(self.wsgi)  # type: ignore[has-type]  # gunicorn is untyped

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

    def _end_streams_before_deadline(self) -> None:
        gevent.sleep(max(0.0, self.cfg.graceful_timeout - END_STREAMS_BEFORE_DEADLINE))
        from proxy.ir.response import ErrorInfo
        from proxy.streaming import end_all_streams

        info = ErrorInfo("unavailable", "The proxy is shutting down and could not finish this stream "
                                        "in time; send the request again.", 503)
        told = end_all_streams(info)
        if told:
            self.log.warning("graceful_timeout nearly over: ended %d stream(s) with an in-band error", told)
