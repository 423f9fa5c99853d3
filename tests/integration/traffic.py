"""Steady client traffic for the fault tests: requests one after another on a few threads,
streamed and not, each judged as a client would judge it (a whole answer, the stream's
terminator), and counted — so a test can compare what the proxy counted with what was sent."""

from __future__ import annotations

import threading
from typing import Any

from tests.conftest import ProxyServer
from tests.integration.test_reload import until
from tests.wire import request

KEY = "sk-traffic-test-key"  # the named client key the fault tests' configs give their traffic
PROTOCOLS = ("chat_completions", "messages", "responses")
PROMPT = "hi [demo:words=3] [demo:pace=2]"


def request_for(protocol: str, stream: bool) -> tuple[str, dict[str, Any], bytes]:
    """The path, body and the bytes a whole answer of `protocol` ends with (as its SDK waits for)."""
    if protocol == "chat_completions":
        return ("/v1/chat/completions", {"model": "demo-model", "stream": stream,
                                         "messages": [{"role": "user", "content": PROMPT}]},
                b"data: [DONE]" if stream else b'"finish_reason":"stop"')
    if protocol == "messages":
        return ("/v1/messages", {"model": "demo-model", "stream": stream, "max_tokens": 64,
                                 "messages": [{"role": "user", "content": PROMPT}]},
                b"event: message_stop" if stream else b'"stop_reason":"end_turn"')
    return ("/v1/responses", {"model": "demo-model", "stream": stream, "input": PROMPT},
            b"event: response.completed" if stream else b'"status":"completed"')


class Traffic:
    """Requests one after another on `threads` threads — streamed and not — until stopped; every
    one must be answered in full (`failures` says how any was not)."""

    def __init__(self, server: ProxyServer, threads: int = 2, key: str = KEY) -> None:
        self.server, self.key = server, key
        self.sent = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def _run(self, i: int) -> None:
        n = 0
        while not self._stop.is_set():
            protocol, stream = PROTOCOLS[(n + i) % len(PROTOCOLS)], (n // len(PROTOCOLS) + i) % 2 == 0
            n += 1
            path, body, done = request_for(protocol, stream)
            try:
                resp = request(self.server.url, "POST", path, body,
                               headers={"Authorization": f"Bearer {self.key}", "anthropic-version": "2023-06-01"},
                               timeout=30)
                text = resp.body()
                resp.close()
                if resp.status != 200 or done not in text:
                    self.failures.append(f"{protocol} stream={stream}: {resp.status}: {text[:300]!r}")
            except Exception as exc:
                self.failures.append(f"{protocol} stream={stream}: {type(exc).__name__}: {exc}")
            with self._lock:
                self.sent += 1

    def until_sent(self, more: int) -> None:
        target = self.sent + more
        until(lambda: self.sent >= target or self.failures, seconds=60)

    def stop(self) -> int:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        return self.sent
