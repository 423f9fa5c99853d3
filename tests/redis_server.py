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
            durable: bool = False, extra: list[str] | None = None) -> subprocess.Popen[bytes]:
    """`extra`: more arguments (a TLS port and its files, say; port 0 then turns plain TCP off)."""
    args = [binary or shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1", "--port", str(port),
            "--dir", directory, "--save", "", "--protected-mode", "yes", "--notify-keyspace-events", "",
            *(extra or [])]
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


# ---------------------------------------------------------------- Redis with Sentinel

class LogFollower:
    """Reads a process's output as it comes (so its pipe never fills and stalls it) and lets a test
    wait for a line: readiness, a failover's steps — events, not sleeps."""

    def __init__(self, process: subprocess.Popen[bytes], name: str) -> None:
        import threading

        self.process, self.name = process, name
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            with self._changed:
                self.lines.append(raw.decode(errors="replace").rstrip())
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, needle: str, timeout: float = 30, after: int = 0, count: int = 1) -> int:
        """Block until `count` lines from line `after` on contain `needle`; the index after the last."""
        import time

        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [i for i, line in enumerate(self.lines[after:], after) if needle in line]
                if len(found) >= count:
                    return found[count - 1] + 1
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._thread.is_alive()):
                    tail = " / ".join(self.lines[-5:])
                    raise AssertionError(f"{self.name} never said {needle!r} (last lines: {tail})")
                self._changed.wait(min(left, 0.5))


@dataclass
class RedisNode:
    port: int
    directory: str
    args: list[str]
    process: subprocess.Popen[bytes]
    log: LogFollower

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)

    def start(self) -> None:
        """Start again (after a kill) with the same arguments, on the same port."""
        self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.log = LogFollower(self.process, self.log.name)


def _node(name: str, port: int, args: list[str], ready: str) -> RedisNode:
    directory = tempfile.mkdtemp(prefix=f"llm-proxy-{name}-")
    args = [a.replace("{dir}", directory) for a in args]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    node = RedisNode(port, directory, args, process, LogFollower(process, name))
    node.log.wait_for(ready)
    return node


@dataclass
class SentinelCluster:
    """A primary, a replica and three sentinels watching them as `service`, all on loopback."""

    service: str
    password: str | None
    nodes: list[RedisNode]  # [the first primary, the first replica]
    sentinels: list[RedisNode]

    @property
    def hosts(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.sentinels]

    def primary(self) -> RedisNode:
        """The node the sentinels call primary now."""
        import redis

        client = redis.Redis(port=self.sentinels[0].port, socket_timeout=5)
        try:
            _host, port = client.sentinel_get_master_addr_by_name(self.service)
        finally:
            client.close()
        return next(node for node in self.nodes if node.port == int(port))

    def fail_over_by_killing_the_primary(self, timeout: float = 60) -> RedisNode:
        """Kill the primary (SIGKILL, as a crashed host) and return once every sentinel has switched
        to the replica they promoted; that replica is returned. The killed node is started again,
        and the sentinels make it a replica of the new primary (so the next failover has one):
        this returns once it has the new primary's data."""
        old = self.primary()
        marks = [len(s.log.lines) for s in self.sentinels]
        old.kill()
        for sentinel, mark in zip(self.sentinels, marks, strict=True):
            sentinel.log.wait_for("+switch-master", timeout=timeout, after=mark)
        new = self.primary()
        assert new is not old
        old.start()
        old.log.wait_for("MASTER <-> REPLICA sync: Finished with success")  # a replica again, with the data
        return new

    def stop(self) -> None:
        for node in [*self.sentinels, *self.nodes]:
            if node.process.poll() is None:
                node.process.kill()
                node.process.wait(timeout=10)
            shutil.rmtree(node.directory, ignore_errors=True)


def start_sentinel_cluster(password: str | None = None, service: str = "llmproxy") -> SentinelCluster:
    binary, sentinel_binary = shutil.which("redis-server"), shutil.which("redis-sentinel")
    if binary is None or sentinel_binary is None:
        missing = "redis-server" if binary is None else "redis-sentinel"
        if os.environ.get("LLM_PROXY_REDIS_TESTS") == "required":
            pytest.fail(f"{missing} is not installed (apt-get install redis-server redis-sentinel), and "
                        "LLM_PROXY_REDIS_TESTS=required says the Redis tests must run")
        pytest.skip(f"{missing} is not installed (apt-get install redis-server redis-sentinel; .ci/run installs it)")
    auth = ["--requirepass", password, "--masterauth", password] if password else []
    base = ["--bind", "127.0.0.1", "--dir", "{dir}", "--save", "", "--appendonly", "no", *auth]
    primary_port, replica_port = _free_port(), _free_port()
    nodes = [_node("redis-primary", primary_port, [binary, "--port", str(primary_port), *base],
                   "Ready to accept connections")]
    nodes.append(_node("redis-replica", replica_port, [binary, "--port", str(replica_port), *base, "--replicaof",
                                                       "127.0.0.1", str(primary_port)],
                       "MASTER <-> REPLICA sync: Finished with success"))
    sentinels = []
    for i in range(3):
        port = _free_port()
        directory = tempfile.mkdtemp(prefix=f"llm-proxy-sentinel-{i}-")
        config = os.path.join(directory, "sentinel.conf")  # the sentinel rewrites it: its own file
        with open(config, "w") as fh:
            fh.write(f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
                     f"sentinel monitor {service} 127.0.0.1 {primary_port} 2\n"
                     f"sentinel down-after-milliseconds {service} 1000\n"
                     f"sentinel failover-timeout {service} 5000\n"
                     f"sentinel parallel-syncs {service} 1\n"
                     + (f"sentinel auth-pass {service} {password}\n" if password else ""))
        process = subprocess.Popen([sentinel_binary, config], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        node = RedisNode(port, directory, [sentinel_binary, config], process, LogFollower(process, f"sentinel-{i}"))
        sentinels.append(node)
    cluster = SentinelCluster(service, password, nodes, sentinels)
    try:
        for sentinel in sentinels:  # each knows the replica and the two other sentinels: a failover can happen
            sentinel.log.wait_for("+monitor master")
            sentinel.log.wait_for("+slave slave")
            sentinel.log.wait_for("+sentinel sentinel", count=2)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture
def sentinel_cluster() -> Iterator[SentinelCluster]:
    cluster = start_sentinel_cluster()
    yield cluster
    cluster.stop()
