"""Redis that fails over, under a live proxy with real redis-server and redis-sentinel processes
(tests/redis_server.py): the primary is killed mid-traffic, the sentinels promote the replica, and
no client request fails; usage totals and the key's limit counters are whole after the switch
(what could not be written meanwhile is written once the new primary answers); /readyz says
degraded during the switch and ok after. And: a password Redis refuses is a start-up error in one
line, not a retry loop; rediss:// (TLS) works (proxy/state/redis_connection.py)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy
from tests.integration.test_pool import ADMIN_KEY, admin
from tests.integration.test_reload import until
from tests.integration.traffic import KEY, Traffic
from tests.redis_server import RedisServer, SentinelCluster, _free_port, _launch, start_redis
from tests.wire import request


def redis_config(demo: DemoUpstream, state: dict[str, Any]) -> dict[str, Any]:
    return base_config(demo.url, admin_keys=[ADMIN_KEY], state={"backend": "redis", **state},
                       client_keys=[{"name": "failover-team", "key": KEY,
                                     "limits": {"tokens_per_day": 10_000_000, "requests_per_minute": 100_000}}])


def readiness(server: ProxyServer) -> dict[str, Any]:
    return dict(request(server.url, "GET", "/readyz").json())


def totals(server: ProxyServer) -> dict[str, Any]:
    status, body = admin(server, "GET", "/admin/usage")
    return dict(body["totals"]) if status == 200 else {}


def tokens_counted(server: ProxyServer) -> int | None:
    status, body = admin(server, "GET", "/admin/keys")
    if status != 200:
        return None
    (key,) = [k for k in body["data"] if k["name"] == "failover-team"]
    return int(key["budget"]["tokens_per_day"]["used"])


class ReadinessWatch:
    """/readyz, asked again and again while a fault happens: every `state` it answered."""

    def __init__(self, server: ProxyServer) -> None:
        self.server = server
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen.append(str(readiness(self.server).get("state")))

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.seen


def test_a_primary_killed_mid_traffic_fails_no_request_and_loses_no_count(
        demo_upstream: DemoUpstream, sentinel_cluster: SentinelCluster, tmp_path: Path) -> None:
    config = redis_config(demo_upstream, {"sentinel": {"hosts": sentinel_cluster.hosts,
                                                       "service_name": sentinel_cluster.service}})
    server = start_proxy(config, tmp_path, workers=2)
    traffic = watch = None
    try:
        traffic = Traffic(server, threads=4)
        traffic.until_sent(60)
        watch = ReadinessWatch(server)
        sentinel_cluster.fail_over_by_killing_the_primary()
        traffic.until_sent(60)  # on the promoted replica now
        seen = watch.stop()
        watch = None
        assert "degraded" in seen, "the switch never showed on /readyz"
        until(lambda: readiness(server).get("state") == "ok", seconds=30)
        sent = traffic.stop()
        assert not traffic.failures, traffic.failures[:5]
        traffic = None
        until(lambda: totals(server).get("requests") == sent, seconds=30)
        counted = totals(server)
        assert counted["errors"] == 0
        until(lambda: tokens_counted(server) == counted["input_tokens"] + counted["output_tokens"], seconds=30)
        assert "Traceback" not in server.log()
    finally:
        if watch is not None:
            watch.stop()
        if traffic is not None:
            traffic.stop()
        stop_proxy(server)


@pytest.fixture
def redis_with_password() -> Iterator[RedisServer]:
    server = start_redis(password="the-right-one")
    yield server
    server.stop()


@pytest.mark.parametrize("how", ["url", "sentinel"])
def test_a_password_redis_refuses_stops_the_start_with_one_line(demo_upstream: DemoUpstream, tmp_path: Path,
                                                               redis_with_password: RedisServer, how: str) -> None:
    if how == "url":
        state: dict[str, Any] = {"url": f"redis://:not-the-one@127.0.0.1:{redis_with_password.port}/0"}
        sentinel = None
    else:
        sentinel = sentinel_for(redis_with_password, tmp_path)
        state = {"sentinel": {"hosts": [f"127.0.0.1:{sentinel.port}"], "service_name": "solo",
                              "password": "not-the-one"}}
    try:
        server = start_proxy(redis_config(demo_upstream, state), tmp_path)
        assert server.process.wait(timeout=60) == 2
        lines = [line for line in server.log().splitlines() if line.startswith("llm-proxy:")]
        key = "state.url" if how == "url" else "state.sentinel.password"
        assert len(lines) == 1 and lines[0].startswith(f"llm-proxy: config error: {key}: Redis refused the password")
        assert "not-the-one" not in server.log() and "Booting worker" not in server.log()
    finally:
        if sentinel is not None:
            sentinel.process.kill()
            sentinel.process.wait()


def sentinel_for(primary: RedisServer, tmp_path: Path) -> Any:
    """One sentinel watching `primary` as "solo" (it knows the right password)."""
    import shutil

    from tests.redis_server import LogFollower, RedisNode

    port = _free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\nsentinel monitor solo 127.0.0.1 "
                      f"{primary.port} 1\nsentinel auth-pass solo the-right-one\n")
    binary = shutil.which("redis-sentinel") or "redis-sentinel"
    process = subprocess.Popen([binary, str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    node = RedisNode(port, str(tmp_path), [binary, str(config)], process, LogFollower(process, "sentinel"))
    node.log.wait_for("+monitor master")
    return node


def test_rediss_tls_keeps_working(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    port = _free_port()
    directory = tmp_path / "redis-tls"
    directory.mkdir()
    process = _launch(0, str(directory), None, extra=["--tls-port", str(port), "--tls-cert-file", str(cert_file),
                                                      "--tls-key-file", str(key_file), "--tls-ca-cert-file",
                                                      str(ca_file), "--tls-auth-clients", "no"])
    server = None
    try:
        url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca_file}"
        server = start_proxy(redis_config(demo_upstream, {"url": url}), tmp_path)
        traffic = Traffic(server)
        traffic.until_sent(9)
        sent = traffic.stop()
        assert not traffic.failures, traffic.failures[:5]
        until(lambda: totals(server).get("requests") == sent, seconds=30)
        assert readiness(server)["state"] == "ok"
    finally:
        if server is not None:
            stop_proxy(server)
        process.kill()
        process.wait()
