"""TLS served by the proxy itself: `server.tls: {certfile, keyfile}` in the config, handed to
gunicorn. A CA and a server certificate for 127.0.0.1 and localhost from `trustme`; the OpenAI SDK
(httpx, verifying against that CA) streams a chat completion over https; plain http to the TLS port
gets no answer, one warning line in the log and no traceback, and the server goes on serving; a config naming a missing key file is one line at
check-config."""

from __future__ import annotations

import http.client
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme
import yaml
from openai import OpenAI

from tests.conftest import CLIENT_KEY, DemoUpstream, ProxyServer, base_config, start_proxy, stop_proxy

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def ca_and_server(demo_upstream: DemoUpstream,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ProxyServer]]:
    tmp = Path(tmp_path_factory.mktemp("tls"))
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(tmp / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp / "cert.pem"))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(tmp / "cert.pem"), append=True)
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    config = base_config(demo_upstream.url, server={"tls": {"certfile": str(tmp / "cert.pem"),
                                                             "keyfile": str(tmp / "key.pem")}})
    server = start_proxy(config, tmp)
    server.url = server.url.replace("http://", "https://")
    yield tmp / "ca.pem", server
    stop_proxy(server)


def test_a_stream_over_https_with_the_openai_sdk(ca_and_server: tuple[Path, ProxyServer]) -> None:
    ca_path, server = ca_and_server
    with httpx.Client(verify=ssl.create_default_context(cafile=str(ca_path))) as http:
        client = OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, http_client=http, max_retries=0)
        stream = client.chat.completions.create(model="demo-model", stream=True, messages=[
            {"role": "user", "content": "Hello [demo:words=5] [demo:pace=0]"}])
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert len(text.split()) == 5
    assert f"serving {server.url} " in server.log()  # the startup summary says https://


def test_the_certificate_is_checked(ca_and_server: tuple[Path, ProxyServer]) -> None:
    _, server = ca_and_server
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{server.url}/healthz", timeout=10)  # the system's CAs do not know trustme's


def test_plain_http_to_the_tls_port_fails_cleanly(ca_and_server: tuple[Path, ProxyServer]) -> None:
    ca_path, server = ca_and_server
    host, port = server.url.removeprefix("https://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine)):
        conn.request("GET", "/healthz")
        conn.getresponse()
    conn.close()
    # and the server goes on serving https
    assert httpx.get(f"{server.url}/healthz", verify=ssl.create_default_context(cafile=str(ca_path)),
                     timeout=10).status_code == 200
    assert "[SSL: HTTP_REQUEST]" in server.log() and "Traceback" not in server.log()  # one line, no traceback


def test_a_missing_key_file_is_one_line_at_check_config(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("x")
    config = base_config("http://127.0.0.1:1/v1", server={"tls": {"certfile": str(tmp_path / "cert.pem"),
                                                                  "keyfile": str(tmp_path / "nope.pem")}})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run([sys.executable, "-m", "proxy.serving.cli", "check-config", str(tmp_path / "config.yaml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"llm-proxy: config error: server.tls.keyfile: {str(tmp_path / 'nope.pem')!r} does not exist or is not a file"]
