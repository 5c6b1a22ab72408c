"""listening_pid: the process behind a URL on this machine's loopback, found through /proc."""

from __future__ import annotations

import socket
import subprocess
import sys

from pytest_streamguard.common.cpu import listening_pid

SERVER = (
    "import socket, sys; s = socket.create_server(('127.0.0.1', 0)); "
    "print(s.getsockname()[1], flush=True); sys.stdin.read()"
)


def test_the_process_listening_on_a_loopback_port_is_found() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as server:
        assert server.stdout is not None
        assert server.stdin is not None
        port = int(server.stdout.readline())
        assert listening_pid(f"http://127.0.0.1:{port}/readyz") == server.pid
        assert listening_pid(f"http://localhost:{port}") == server.pid
        server.stdin.close()


def test_no_process_where_the_url_is_elsewhere_unbound_or_served_by_this_process() -> None:
    with socket.create_server(("127.0.0.1", 0)) as own:
        # A server in a thread of this process: its main thread is not the one that serves.
        assert listening_pid(f"http://127.0.0.1:{own.getsockname()[1]}") is None
    with socket.socket() as unbound:
        unbound.bind(("127.0.0.1", 0))
        assert listening_pid(f"http://127.0.0.1:{unbound.getsockname()[1]}") is None
    assert listening_pid("http://192.0.2.7:8000") is None
    assert listening_pid("http://127.0.0.1") is None
