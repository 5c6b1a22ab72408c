"""How long a thread waited for a CPU (``schedstat``'s run-queue time): a busy machine's share
of a wait, which the findings take off rather than blame on the app."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from urllib.parse import urlsplit


def schedstat(path: str) -> tuple[int, int, int] | None:
    """The ``schedstat`` at ``path`` of a thread: its time on a CPU and its run-queue wait so far
    (ns), and how many times it ran; None where there is none (another system, a thread gone)."""
    try:
        with open(path, "rb") as stats:
            ran, waited, runs = (int(field) for field in stats.read().split()[:3])
    except (OSError, ValueError):
        return None
    return ran, waited, runs


def thread_waits_ns(pid: int | None) -> dict[int, int] | None:
    """The run-queue wait so far of each of process ``pid``'s threads by id, and :func:`stolen_ns`
    under 0; None without a pid or once it is gone. A thread that holds the interpreter's lock
    while it waits for a CPU (the embedded Toxiproxy's log writer) holds its loop as long."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task") if pid is not None else []
    except OSError:
        return None
    stats = {int(t): schedstat(f"/proc/{pid}/task/{t}/schedstat") for t in tasks}
    kept = {t: ns[1] for t, ns in stats.items() if ns is not None}
    return kept | {0: stolen_ns()} if stats else None


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
