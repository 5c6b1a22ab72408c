"""listening_pid: the process behind a URL on this machine's loopback, found through /proc; the
host's steal and every thread's wait, which the busy-machine excuses count as waits for a CPU."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from pytest_streamguard.common.cpu import (
    listening_pid,
    schedstat,
    stolen_ns,
    thread_waits_ns,
)


def waited_between(before: dict[int, int], after: dict[int, int]) -> int:
    """The wait between two ``thread_waits_ns`` readings, of the threads in the second (as the
    stream's transport reads the embedded Toxiproxy's)."""
    return sum(ns - before.get(t, 0) for t, ns in after.items())


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


def test_a_process_wait_counts_every_thread_not_only_the_main_one() -> None:
    # Two threads on one CPU, each hashing outside the interpreter's lock: each waits on the
    # run queue while the other runs. They stay alive (a thread that ended is no longer read).
    done, release = threading.Barrier(3), threading.Event()

    def crowd() -> None:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        hashlib.pbkdf2_hmac("sha256", b"streamguard", b"salt", 400_000)
        done.wait()
        release.wait()

    threads = [threading.Thread(target=crowd) for _ in range(2)]
    before, main_before = (
        thread_waits_ns(os.getpid()),
        schedstat(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"),
    )
    for thread in threads:
        thread.start()
    try:
        done.wait()
        after, main_after = (
            thread_waits_ns(os.getpid()),
            schedstat(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"),
        )
    finally:
        release.set()
        for thread in threads:
            thread.join()
    # Read again once they ended: the threads gone are left out, never counted as negative.
    gone = thread_waits_ns(os.getpid())
    assert before is not None
    assert after is not None
    assert gone is not None
    assert main_before is not None
    assert main_after is not None
    assert set(after) - set(before) == {t.native_id for t in threads}
    # Each thread waits for much of the other's hashing (0.12 s of CPU each, measured here).
    others = waited_between(before, after) - (main_after[1] - main_before[1])
    assert others >= 20_000_000, others
    assert waited_between(after, gone) >= 0
    assert thread_waits_ns(None) is None
