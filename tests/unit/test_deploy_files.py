"""The deployment guide's files (docs/deploy/): the systemd unit passes `systemd-analyze verify`
without a warning and rates "OK" in `systemd-analyze security`, with the hardening options a
service should have; nginx accepts its example site (`nginx -t`); and docs/deploying.md shows each
file exactly as it is in the repository (so what is tested is what the guide shows). nginx and
Caddy themselves run in tests/integration/test_behind_proxies.py.

The unit cannot be started here (no systemd as PID 1): only verified. `verify` needs ExecStart's
binary on disk, so a copy names this checkout's `llm-proxy` instead of /opt/llm-proxy/bin/llm-proxy.
Without systemd-analyze or nginx these tests skip, unless LLM_PROXY_FRONT_TESTS=required.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import front_servers

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY = ROOT / "docs" / "deploy"
UNIT = DEPLOY / "llm-proxy.service"
INSTALLED = "/opt/llm-proxy/bin/llm-proxy"

HARDENING = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
    "PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes", "RestrictNamespaces": "yes",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "LockPersonality": "yes",
    "SystemCallArchitectures": "native", "CapabilityBoundingSet": "", "KillMode": "mixed",
    "KillSignal": "SIGTERM", "Restart": "on-failure", "ExecReload": "/bin/kill -HUP $MAINPID",
    "StateDirectory": "llm-proxy", "User": "llm-proxy",
}


def settings(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^(\w+)=(.*)$", text, re.M)}


def systemd_analyze() -> str:
    return front_servers.require("systemd-analyze")


def local_copy(tmp_path: Path) -> Path:
    llm_proxy = Path(sys.executable).parent / "llm-proxy"
    assert llm_proxy.exists(), "the package is not installed in this environment (pip install -e .)"
    text = UNIT.read_text()
    assert INSTALLED in text
    copy = tmp_path / "llm-proxy.service"
    copy.write_text(text.replace(INSTALLED, str(llm_proxy)))
    return copy


def test_the_unit_has_the_hardening_a_service_should_have() -> None:
    found = settings(UNIT.read_text())
    assert {key: found.get(key) for key in HARDENING} == HARDENING
    assert found["ExecStart"] == f"{INSTALLED} serve --config /etc/llm-proxy/config.yaml --bind 127.0.0.1:8080"
    # the run directory (metrics files) in the unit's RuntimeDirectory, writable under ProtectSystem=strict
    assert found["Environment"] == "LLM_PROXY_RUN_DIR=/run/llm-proxy" and found["RuntimeDirectory"] == "llm-proxy"
    # longer than gunicorn's graceful_timeout (60 s), so streams finish before systemd kills
    assert int(found["TimeoutStopSec"]) > 60


def test_systemd_analyze_verify_accepts_the_unit_without_a_warning(tmp_path: Path) -> None:
    result = subprocess.run([systemd_analyze(), "verify", str(local_copy(tmp_path))], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stderr.strip() == "" and result.stdout.strip() == "", result.stderr


def test_systemd_rates_the_units_exposure_ok(tmp_path: Path) -> None:
    result = subprocess.run([systemd_analyze(), "security", "--offline=yes", str(local_copy(tmp_path))],
                            capture_output=True, text=True, timeout=60)
    level = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", result.stdout + result.stderr)
    assert level, result.stdout + result.stderr
    assert float(level.group(1)) < 2.5 and level.group(2) == "OK", level.group(0)


def test_nginx_accepts_the_example_site(tmp_path: Path) -> None:
    nginx = front_servers.require("nginx")
    (tmp_path / "site.conf").write_text(front_servers.nginx_site("127.0.0.1:8080", front_servers.free_port()))
    (tmp_path / "nginx.conf").write_text(f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
                                         f"events {{}}\nhttp {{ include {tmp_path}/site.conf; }}\n")
    result = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-e",
                             str(tmp_path / "error.log")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_caddy_accepts_the_example_caddyfile_as_it_is(tmp_path: Path) -> None:
    caddy = front_servers.require("caddy")
    shutil.copy(DEPLOY / "Caddyfile", tmp_path / "Caddyfile")
    result = subprocess.run([caddy, "validate", "--config", str(tmp_path / "Caddyfile"), "--adapter", "caddyfile"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", ["nginx.conf", "Caddyfile", "llm-proxy.service"])
def test_the_guide_shows_each_file_as_it_is(name: str) -> None:
    guide = (ROOT / "docs" / "deploying.md").read_text()
    blocks = re.findall(r"^```[\w-]*\n(.*?)^```$", guide, re.M | re.S)
    assert (DEPLOY / name).read_text() in blocks, f"docs/deploying.md does not show docs/deploy/{name} as it is"
