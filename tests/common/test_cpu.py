"""listening_pid: the process behind a URL on this machine's loopback, found through /proc; the
host's steal, which the busy-machine excuses count as a wait for a CPU."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from pytest_streamguard.common.cpu import listening_pid, stolen_ns

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


def test_the_hosts_steal_is_read_from_the_first_line_of_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 5 900 1 0 2 250 0 0\ncpu0 5 0 2 450 0 0 1 125 0 0\n")
    assert stolen_ns(str(stat)) == 250 * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    # A kernel that does not count steal (fewer columns), or no such file: nothing taken.
    stat.write_text("cpu  10 0 5 900\n")
    assert stolen_ns(str(stat)) == 0
    assert stolen_ns(str(tmp_path / "missing")) == 0
    assert stolen_ns() >= 0
