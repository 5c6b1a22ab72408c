"""The reaper: a tiny watchdog process that stops what a pytest process started once it dies.

Run by path (``python -I -S _reaper.py [WATCH_PID]``), never imported: it needs only the
standard library, so it starts in a few milliseconds and does not load the plugin. Its stdin is
the read end of a pipe whose only write end the pytest process holds. The owner writes one line
per change::

    +g PGID   a process group to stop    -g PGID   forget it (stopped normally)
    +d PATH   a directory to delete      -d PATH   forget it (deleted normally)

EOF on stdin means the owner is gone, however it ended (SIGKILL included: the kernel closes its
file descriptors). The reaper then sends SIGTERM to every registered group, SIGKILL after a
short grace to whatever is left, deletes the registered directories and exits. With
``WATCH_PID`` (a pytest-xdist worker passes its controller's pid) the death of that process
counts too: the reaper then also SIGKILLs its owner (the worker) before cleaning up, so a killed
controller leaves no worker behind.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import time
from collections.abc import Callable

#: Seconds between SIGTERM and SIGKILL once the owner is dead: short, so everything is gone
#: well within a few seconds of pytest's death.
GRACE_S = 1.0


def _exists(kill: Callable[[int, int], None], pid: int) -> bool:  # os.kill or os.killpg
    try:
        kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _apply(line: str, groups: set[int], dirs: set[str]) -> None:
    op, _, arg = line.partition(" ")
    if op in ("+g", "-g") and arg.isdigit():
        (groups.add if op == "+g" else groups.discard)(int(arg))
    elif op == "+d" and arg:
        dirs.add(arg)
    elif op == "-d":
        dirs.discard(arg)


def _cleanup(groups: set[int], dirs: set[str]) -> None:
    for pgid in groups:
        _signal(pgid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while any(_exists(os.killpg, pgid) for pgid in groups) and time.monotonic() < deadline:
        time.sleep(0.02)
    # Unconditionally: a group whose leader exited may still hold a grandchild.
    for pgid in groups:
        _signal(pgid, signal.SIGKILL)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


def _watch_fd(pid: int) -> int | None:
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        return int(pidfd_open(pid))
    except OSError:
        return None


def main(argv: list[str]) -> int:
    """Read registrations until EOF (or the watched pid's death), then clean up and exit."""
    # Ctrl-C in the terminal reaches the whole foreground group; the reaper must outlive it.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    owner = os.getppid()
    watch = int(argv[1]) if len(argv) > 1 else None
    watch_fd = _watch_fd(watch) if watch is not None else None
    groups: set[int] = set()
    dirs: set[str] = set()
    buffer = b""
    watched_died = False
    while True:
        fds = [0] if watch_fd is None else [0, watch_fd]
        # Without a pidfd the watched pid is polled every 0.2 s.
        timeout = 0.2 if watch is not None and watch_fd is None else None
        ready, _, _ = select.select(fds, [], [], timeout)
        if watch is not None and (
            (watch_fd is not None and watch_fd in ready)
            or (watch_fd is None and not ready and not _exists(os.kill, watch))
        ):
            watched_died = True
            break
        if 0 not in ready:
            continue
        data = os.read(0, 65536)
        if not data:
            break
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            _apply(raw.decode("utf-8", "surrogateescape"), groups, dirs)
    if watched_died:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(owner, signal.SIGKILL)
        # The owner is dead now: read what it registered last, up to EOF.
        while data := os.read(0, 65536):
            buffer += data
        for raw in buffer.split(b"\n"):
            _apply(raw.decode("utf-8", "surrogateescape"), groups, dirs)
    _cleanup(groups, dirs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
