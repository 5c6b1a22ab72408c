"""The console script and ``python -m``: flags, startup line, -config, signals, -seed."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from toxiproxy_helpers import REPO, Upstream, connect, echo, recv_exactly, start_server

from pytest_streamguard.common.tls import tls_context


def test_startup_line_contract() -> None:
    process = start_server()
    try:
        line = process.startup
        assert line["message"] == "Starting Toxiproxy HTTP server"
        assert line["host"] == "127.0.0.1"
        assert line["version"] == "2.12.0"
        assert isinstance(line["port"], str)
        assert httpx.get(f"{process.url}/version", verify=tls_context()).status_code == 200
    finally:
        status = process.stop(signal.SIGINT)
    assert status == 0


def test_console_script_and_double_dash_flags() -> None:
    script = shutil.which("streamguard-toxiproxy", path=str(Path(sys.executable).parent))
    assert script is not None, "streamguard-toxiproxy is not installed in the venv"
    out = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert out.stdout == "toxiproxy-server version 2.12.0\n"
    bad = subprocess.run([script, "-port", "70000"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2
    assert "invalid port 70000: expected 0-65535" in bad.stderr


def test_config_populates_at_start(tmp_path: Path) -> None:
    shipped = json.loads((REPO / "toxiproxy" / "toxiproxy.json").read_text())
    assert isinstance(shipped, list)
    assert {"name", "listen", "upstream"} <= set(shipped[0])
    target = Upstream(echo)
    # The shipped file's fixed port may be in use on a shared machine: same file, port 0.
    config = [{**entry, "listen": "127.0.0.1:0", "upstream": target.address} for entry in shipped]
    path = tmp_path / "toxiproxy.json"
    path.write_text(json.dumps(config))
    process = start_server("--config", str(path))
    try:
        proxies = httpx.get(f"{process.url}/proxies", verify=tls_context()).json()
        assert set(proxies) == {entry["name"] for entry in shipped}
        listen = proxies[shipped[0]["name"]]["listen"]
        with connect(listen) as sock:
            sock.sendall(b"cfg")
            assert recv_exactly(sock, 3) == b"cfg"
    finally:
        target.close()
        assert process.stop() == 0


def test_bad_config_fails_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[{"name": "x"}]')
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_streamguard.toxiproxy_server",
            "-port",
            "0",
            "-config",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert run.returncode == 1
    assert "missing required field: upstream at proxy 1" in run.stderr


def _delayed_pattern(url: str, target: Upstream) -> list[bool]:
    """Which of 12 new connections a toxicity-0.5 latency toxic affects."""
    body = {"name": "s", "listen": "127.0.0.1:0", "upstream": target.address}
    listen = httpx.post(f"{url}/proxies", json=body, verify=tls_context()).json()["listen"]
    toxic = {"type": "latency", "toxicity": 0.5, "attributes": {"latency": 150}}
    assert (
        httpx.post(f"{url}/proxies/s/toxics", json=toxic, verify=tls_context()).status_code == 200
    )
    pattern = []
    for _ in range(12):
        with connect(listen) as sock:
            started = time.perf_counter()
            sock.sendall(b"?")
            recv_exactly(sock, 1)
            pattern.append(time.perf_counter() - started > 0.1)
    return pattern


def test_seed_makes_toxicity_draws_reproducible() -> None:
    target = Upstream(echo)
    patterns = []
    try:
        for _ in range(2):
            process = start_server("-seed", "42")
            try:
                patterns.append(_delayed_pattern(process.url, target))
            finally:
                assert process.stop() == 0
    finally:
        target.close()
    assert patterns[0] == patterns[1]
    assert 0 < sum(patterns[0]) < 12


def test_api_port_in_use_fails_loudly() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        run = subprocess.run(
            [sys.executable, "-m", "pytest_streamguard.toxiproxy_server", "-port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO,
        )
    assert run.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in run.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_closes_proxies_and_exits_zero(sig: int) -> None:
    target = Upstream(echo)
    process = start_server()
    try:
        body = {"name": "x", "listen": "127.0.0.1:0", "upstream": target.address}
        listen = httpx.post(f"{process.url}/proxies", json=body, verify=tls_context()).json()[
            "listen"
        ]
        sock = connect(listen)
        sock.sendall(b"a")
        assert recv_exactly(sock, 1) == b"a"
        assert process.stop(sig) == 0
        assert sock.recv(10) == b""
        sock.close()
    finally:
        target.close()
        process.stop()
