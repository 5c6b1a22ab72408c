"""How long a thread waited for a CPU (``schedstat``'s run-queue time): a busy machine's share
of a wait, which the findings take off rather than blame on the app."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from urllib.parse import urlsplit


def waited_ns(path: str) -> int | None:
    """The run-queue wait so far (ns) of the thread whose ``schedstat`` is at ``path``; None
    where there is none (another system, a thread gone)."""
    try:
        with open(path, "rb") as stats:
            return int(stats.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def main_thread_waited_ns(pid: int | None) -> int | None:
    """:func:`waited_ns` of process ``pid``'s main thread; None without a pid."""
    return None if pid is None else waited_ns(f"/proc/{pid}/task/{pid}/schedstat")


def thread_waits_ns(pid: int | None) -> dict[int, int] | None:
    """The :func:`waited_ns` of each of process ``pid``'s threads by id, and :func:`stolen_ns`
    under 0; None without a pid or once it is gone. A thread that holds the interpreter's lock
    while it waits for a CPU (the embedded Toxiproxy's log writer) holds its loop as long."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task") if pid is not None else []
    except OSError:
        return None
    waits = {int(t): waited_ns(f"/proc/{pid}/task/{t}/schedstat") for t in tasks}
    kept = {t: ns for t, ns in waits.items() if ns is not None}
    return kept | {0: stolen_ns()} if waits else None


def waited_between(before: dict[int, int], after: dict[int, int]) -> int:
    """The wait between two :func:`thread_waits_ns` readings of the threads in the second."""
    return sum(ns - before.get(t, 0) for t, ns in after.items())


def stolen_ns(path: str = "/proc/stat") -> int:
    """What a VM's host took of its CPUs so far (``/proc/stat``'s steal, ns, all CPUs; 0 if not
    counted): to its kernel a thread runs on meanwhile. An excuse too many for another CPU's."""
    with contextlib.suppress(OSError, IndexError, ValueError), open(path, "rb") as stat:
        return int(stat.readline().split()[8]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return 0


@functools.lru_cache(maxsize=32)
def listening_pid(url: str) -> int | None:
    """The process listening on ``url``'s loopback port (looked up once, in ``/proc``): a target
    or Toxiproxy given by URL but running here, whose CPU waits the findings take off too. None
    where not found (another host or PID namespace) or in this process (a thread's server)."""
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1") or parts.port is None:
        return None
    port, sockets, own = f"{parts.port:04X}", set(), str(os.getpid())
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                if (cells := row.split())[3] == "0A" and cells[1].endswith(f":{port}"):  # LISTEN
                    sockets.add(f"socket:[{cells[9]}]")
    if not sockets:
        return None
    for fds in sorted(Path("/proc").glob("[0-9]*/fd"), key=lambda p: int(p.parent.name)):
        with contextlib.suppress(OSError):
            if fds.parent.name != own and any(os.readlink(fd) in sockets for fd in fds.iterdir()):
                return int(fds.parent.name)
    return None
