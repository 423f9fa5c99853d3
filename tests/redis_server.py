"""A real Redis server for tests, on loopback: `redis-server` (Debian's package; `.ci/run` installs
it when missing) started on a socket of its own in a temporary directory, with no persistence, and
stopped at the end (`durable_redis`: with an append-only file, so a restart keeps its data).

A free loopback port is found by binding it and handed to redis-server; readiness is its own log
line "Ready to accept connections", read from its stdout — no polling, no sleep.
Tests that need Redis take the `redis_url` fixture (emptied for each test); `fresh_redis` gives a
server of a test's own (to stop or kill it mid-test). LLM_PROXY_TEST_REDIS_URL names a server to
use instead of starting one (for `redis_url`; it is emptied — give it a database of its own).
Without redis-server on the machine the Redis tests skip, unless LLM_PROXY_REDIS_TESTS=required
(as `.ci/run` sets it, having installed the package), in which case they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass
class RedisServer:
    url: str
    port: int
    process: subprocess.Popen[bytes]
    directory: str
    durable: bool = False  # an append-only file, synced on every write: a restart keeps everything

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)

    def kill(self) -> None:
        """Gone at once, as a crashed host's Redis would be."""
        self.process.kill()
        self.process.wait(timeout=10)

    def restart(self) -> None:
        """Start again on the same port (empty: it keeps nothing on disk), once stopped or killed."""
        if self.process.poll() is None:
            self.kill()
        os.makedirs(self.directory, exist_ok=True)  # stop() removed it
        self.process = _launch(self.port, self.directory, None, durable=self.durable)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])



def start_redis(password: str | None = None, durable: bool = False) -> RedisServer:
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("LLM_PROXY_REDIS_TESTS") == "required":
            pytest.fail("redis-server is not installed (apt-get install redis-server), and "
                        "LLM_PROXY_REDIS_TESTS=required says the Redis tests must run")
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run installs it)")
    directory = tempfile.mkdtemp(prefix="llm-proxy-redis-")
    port = _free_port()
    process = _launch(port, directory, password, binary, durable)
    auth = f":{password}@" if password else ""
    return RedisServer(url=f"redis://{auth}127.0.0.1:{port}/0", port=port, process=process, directory=directory,
                       durable=durable)


def _launch(port: int, directory: str, password: str | None, binary: str | None = None,
            durable: bool = False) -> subprocess.Popen[bytes]:
    args = [binary or shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1", "--port", str(port),
            "--dir", directory, "--save", "", "--protected-mode", "yes", "--notify-keyspace-events", ""]
    args += ["--appendonly", "yes", "--appendfsync", "always"] if durable else ["--appendonly", "no"]
    if password:
        args += ["--requirepass", password]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    seen = []
    for line in process.stdout:  # ends when redis-server exits
        seen.append(line.decode(errors="replace").rstrip())
        if b"Ready to accept connections" in line:
            return process
    process.wait(timeout=10)
    shutil.rmtree(directory, ignore_errors=True)
    raise RuntimeError(f"redis-server did not start on 127.0.0.1:{port}: " + " / ".join(seen[-5:]))



@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer | None]:
    if os.environ.get("LLM_PROXY_TEST_REDIS_URL"):
        yield None  # one given: redis_url uses it
        return
    server = start_redis()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer | None) -> str:
    """The session's Redis, emptied for this test."""
    import redis  # a test dependency; the service declares it in its `redis` extra

    url = os.environ.get("LLM_PROXY_TEST_REDIS_URL") or (redis_server.url if redis_server else "")
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


@pytest.fixture
def fresh_redis() -> Iterator[RedisServer]:
    """A Redis server of this test's own (to stop or kill mid-test)."""
    server = start_redis()
    yield server
    server.stop()


@pytest.fixture
def durable_redis() -> Iterator[RedisServer]:
    """A Redis server of this test's own that keeps its data across `restart` (an append-only file
    synced on every write, as a production Redis is configured): to stop mid-test and bring back."""
    server = start_redis(durable=True)
    yield server
    server.stop()
