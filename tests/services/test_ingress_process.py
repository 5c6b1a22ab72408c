"""The nginx process around the hop: finding it, starting it, stopping it, its config."""

from __future__ import annotations

import math
import os
import pwd
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.errors import IngressError
from pytest_streamguard.services import ingress as ingress_module
from pytest_streamguard.services.ingress import Ingress

NOT_FOUND = re.escape(
    "nginx not found: install Debian's nginx-light (apt-get install nginx-light) or pass nginx=PATH"
)


def processes_in_group(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes whose process group is ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make ``tempfile`` create the ingress prefix under this test's own directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_stop_leaves_no_nginx_process_and_no_files(sse_upstream: str, private_tmp: Path) -> None:
    ingress = Ingress(sse_upstream)
    ingress.start()
    try:
        pid = ingress.pid
        assert pid is not None
        # The master forks its worker after it is ready: on a busy machine, a moment later.
        deadline = time.monotonic() + 10
        while len(members := processes_in_group(pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pid in members
        assert len(members) == 2, f"expected a master and one worker, got {members}"
        assert (
            httpx.get(
                f"{ingress.url}/stream", params={"events": 1}, verify=tls_context()
            ).status_code
            == 200
        )
    finally:
        ingress.stop()

    assert processes_in_group(pid) == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert list(private_tmp.iterdir()) == []
    assert ingress.pid is None
    assert repr(ingress).endswith(" at stopped")
    with pytest.raises(IngressError, match="not started"):
        _ = ingress.address
    ingress.stop()


def test_config_keeps_every_path_in_the_private_prefix(sse_upstream: str) -> None:
    with Ingress(
        sse_upstream, read_timeout=0.5, send_timeout=0.25, buffering=True, gzip=True
    ) as ingress:
        assert ingress.prefix is not None
        conf = (ingress.prefix / "nginx.conf").read_text()
        port = ingress.address.rsplit(":", 1)[1]

    for directive in (
        "daemon off;",
        "worker_processes 1;",
        "access_log off;",
        f"listen 127.0.0.1:{port};",
        f"proxy_pass {sse_upstream};",
        "proxy_http_version 1.1;",
        'proxy_set_header Connection "";',
        "proxy_read_timeout 500ms;",
        "send_timeout 250ms;",
        "proxy_buffering on;",
        "gzip on;",
        "gzip_types text/event-stream application/json text/plain;",
        "gzip_min_length 1;",
        "gzip_proxied any;",
    ):
        assert directive in conf
    for directive in (
        "pid",
        "error_log",
        "client_body_temp_path",
        "proxy_temp_path",
        "fastcgi_temp_path",
        "uwsgi_temp_path",
        "scgi_temp_path",
        "lock_file",
    ):
        assert f'{directive} "{ingress_prefix_of(conf)}/' in conf, directive
    assert "/var/" not in conf
    assert "/run/" not in conf


def ingress_prefix_of(conf: str) -> str:
    """The prefix directory, read back from the ``pid`` line of a generated config."""
    line = next(line for line in conf.splitlines() if line.startswith("pid "))
    return line.split('"')[1].rsplit("/", 1)[0]


def test_worker_drops_root_to_nobody(sse_upstream: str) -> None:
    with Ingress(sse_upstream) as ingress:
        assert ingress.pid is not None
        master = ingress.pid
        # The listener accepts (into its backlog) before the master has forked its worker, and a
        # new worker is root until its init drops to 'nobody'. A worker serves a request only
        # after its init, so one request answered means the worker has switched (read too early,
        # a CI run saw uid 0).
        assert (
            httpx.get(
                f"{ingress.url}/stream", params={"events": 1}, verify=tls_context()
            ).status_code
            == 200
        )
        workers = [pid for pid in processes_in_group(master) if pid != master]
        assert len(workers) == 1
        status = Path(f"/proc/{workers[0]}/status").read_text()
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    # As root (CI) the worker switches to 'nobody'; otherwise it keeps the caller's user.
    expected = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert int(uid_line.split()[1]) == expected


def test_flat_settings_are_accepted() -> None:
    ingress = Ingress("http://127.0.0.1:8000/", read_timeout=1, send_timeout=0.001)
    assert ingress.upstream == "127.0.0.1:8000"
    assert ingress.read_timeout == 1.0
    assert Ingress("[::1]:80").upstream == "[::1]:80"
    assert Ingress("localhost:8080").upstream == "localhost:8080"


def test_port_taken_between_probe_and_bind_is_retried(
    sse_upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports: Iterator[int] = iter([taken])
        real_free_port = ingress_module.free_port
        monkeypatch.setattr(ingress_module, "free_port", lambda: next(ports, real_free_port()))

        with Ingress(sse_upstream) as ingress:
            assert ingress.address != f"127.0.0.1:{taken}"
            response = httpx.get(
                f"{ingress.url}/stream", params={"events": 1}, verify=tls_context()
            )
    assert response.status_code == 200
    assert "event: done" in response.text


def test_starting_twice_is_an_error(sse_upstream: str) -> None:
    with Ingress(sse_upstream) as ingress, pytest.raises(IngressError, match="already started"):
        ingress.start()


def test_missing_binary_names_the_package(tmp_path: Path) -> None:
    missing = tmp_path / "nginx"
    with pytest.raises(IngressError, match=NOT_FOUND) as excinfo:
        Ingress("127.0.0.1:8000", nginx=str(missing)).start()
    assert str(missing) in str(excinfo.value)


def test_binary_missing_from_path_and_fallbacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ingress_module, "NGINX_FALLBACK_PATHS", (str(tmp_path / "nginx"),))
    with pytest.raises(IngressError, match=NOT_FOUND):
        Ingress("127.0.0.1:8000").start()


def test_binary_that_cannot_run_is_reported(tmp_path: Path) -> None:
    fake = tmp_path / "nginx"
    fake.write_text("this is not a program\n")
    fake.chmod(0o755)
    with pytest.raises(IngressError, match="could not run nginx at"):
        Ingress("127.0.0.1:8000", nginx=str(fake)).start()


def test_binary_that_exits_at_start_is_reported(private_tmp: Path) -> None:
    with pytest.raises(IngressError, match="exited with code 1 while starting"):
        Ingress("127.0.0.1:8000", nginx="/bin/false").start()
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"read_timeout": 0}, "read_timeout"),
        ({"read_timeout": -1.0}, "read_timeout"),
        ({"read_timeout": math.nan}, "read_timeout"),
        ({"read_timeout": math.inf}, "read_timeout"),
        ({"read_timeout": "500ms"}, "read_timeout"),
        ({"read_timeout": True}, "read_timeout"),
        ({"send_timeout": 0.0}, "send_timeout"),
        ({"send_timeout": 0.0001}, "send_timeout"),
        ({"buffering": "on"}, "buffering"),
        ({"gzip": 1}, "gzip"),
        ({"nginx": ""}, "nginx"),
        ({"upstream": ""}, "upstream"),
        ({"upstream": "127.0.0.1"}, "upstream"),
        ({"upstream": "127.0.0.1:0"}, "upstream"),
        ({"upstream": "127.0.0.1:70000"}, "upstream"),
        ({"upstream": "https://127.0.0.1:443"}, "upstream"),
        ({"upstream": "http://127.0.0.1:80/api"}, "upstream"),
        ({"upstream": "127.0.0.1:80; return 200"}, "upstream"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], named: str) -> None:
    arguments: dict[str, Any] = {"upstream": "127.0.0.1:8000", **kwargs}
    with pytest.raises(ValueError, match=named) as excinfo:
        Ingress(**arguments)
    if named == "upstream":
        assert "accepted: 'HOST:PORT' or 'http://HOST:PORT'" in str(excinfo.value)
