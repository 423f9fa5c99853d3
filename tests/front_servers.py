"""nginx and Caddy in front of a live proxy, with the example configs the deployment guide shows
(docs/deploy/nginx.conf, docs/deploy/Caddyfile): Debian's packages (`.ci/run` installs them when
missing), run on loopback in a temporary directory, on a free port, and stopped at the end.

Only the lines the example files mark "test:" are replaced — the proxy's address, the listen or site
address, and Caddy's global options (its admin API stays off) — so what is tested is what the guide
shows. nginx gets a minimal main config of its own around the example (pid, logs and temporary files
in the directory; as root, `user root` so its worker can write them). Readiness is the port
accepting a connection, polled with a deadline (the servers have no socket-passing mode).
Without nginx or caddy on the machine their tests skip, unless LLM_PROXY_FRONT_TESTS=required (as
`.ci/run` sets it, having installed the packages), in which case they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "docs" / "deploy"
NGINX = "/usr/sbin/nginx"


@dataclass
class FrontServer:
    name: str
    url: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    directory: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM if self.name == "caddy" else signal.SIGQUIT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)

    def log(self) -> str:
        path = Path(self.directory) / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""


def binary(name: str) -> str | None:
    return shutil.which(name) or (NGINX if name == "nginx" and os.path.exists(NGINX) else None)


def require(name: str) -> str:
    """The server's binary, or skip (fail when LLM_PROXY_FRONT_TESTS=required)."""
    path = binary(name)
    if path is None:
        if os.environ.get("LLM_PROXY_FRONT_TESTS") == "required":
            pytest.fail(f"{name} is not installed, and LLM_PROXY_FRONT_TESTS=required says its tests must run")
        pytest.skip(f"{name} is not installed (Debian: apt-get install {name})")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _marked(text: str, mark: str, replacement: str) -> str:
    """`text` with the one line whose comment is `# test: <mark>` replaced by `replacement`
    (indentation kept); fails if the example no longer has that line."""
    pattern = re.compile(rf"^([ \t]*)\S.*#\s*test: {re.escape(mark)}.*$", re.M)
    found = pattern.findall(text)
    assert len(found) == 1, f"the example config has no single line marked 'test: {mark}'"
    return pattern.sub(lambda m: m.group(1) + replacement, text)


def nginx_site(proxy_addr: str, port: int) -> str:
    text = (DEPLOY / "nginx.conf").read_text()
    text = _marked(text, "the proxy's address", f"server {proxy_addr};")
    return _marked(text, "the listen address", f"listen 127.0.0.1:{port};")


def caddyfile(proxy_addr: str, port: int) -> str:
    text = (DEPLOY / "Caddyfile").read_text()
    text = _marked(text, "global options", "admin off")
    text = _marked(text, "the site address", f"http://127.0.0.1:{port} {{")
    return _marked(text, "the proxy's address", f"reverse_proxy {proxy_addr} {{")


def wait_listening(port: int, process: subprocess.Popen[bytes], what: str, deadline: float = 20) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {deadline}s")


def start_nginx(proxy_addr: str) -> FrontServer:
    path = require("nginx")
    directory = tempfile.mkdtemp(prefix="llm-proxy-nginx-")
    port = free_port()
    (Path(directory) / "llm-proxy.conf").write_text(nginx_site(proxy_addr, port))
    user = "user root root;\n" if os.geteuid() == 0 else ""
    temp = "\n".join(f"    {kind}_temp_path {directory}/{kind};" for kind in
                     ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (Path(directory) / "nginx.conf").write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {directory}/nginx.pid;\nerror_log {directory}/error.log info;\n"
        f"events {{ worker_connections 256; }}\n"
        f"http {{\n    access_log {directory}/access.log;\n{temp}\n    include {directory}/llm-proxy.conf;\n}}\n")
    process = subprocess.Popen([path, "-p", directory, "-c", f"{directory}/nginx.conf", "-e",
                                f"{directory}/error.log"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return listening(FrontServer("nginx", f"http://127.0.0.1:{port}", process, directory), port)


def listening(server: FrontServer, port: int) -> FrontServer:
    """`server` once it listens on `port`; if it exits first, stopped, with its log in the error."""
    try:
        wait_listening(port, server.process, server.name)
    except RuntimeError as exc:
        text = server.log()
        server.stop()
        raise RuntimeError(f"{exc}:\n{text}") from None
    return server


def start_caddy(proxy_addr: str) -> FrontServer:
    path = require("caddy")
    directory = tempfile.mkdtemp(prefix="llm-proxy-caddy-")
    port = free_port()
    config = Path(directory) / "Caddyfile"
    config.write_text(caddyfile(proxy_addr, port))
    env = {**os.environ, "HOME": directory, "XDG_DATA_HOME": f"{directory}/data",
           "XDG_CONFIG_HOME": f"{directory}/config"}
    with open(Path(directory) / "error.log", "wb") as log:
        process = subprocess.Popen([path, "run", "--config", str(config), "--adapter", "caddyfile"],
                                   env=env, cwd=directory, stdout=log, stderr=subprocess.STDOUT)
    return listening(FrontServer("caddy", f"http://127.0.0.1:{port}", process, directory), port)
