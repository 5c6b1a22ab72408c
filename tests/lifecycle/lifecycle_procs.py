"""Finding what a pytest run started, from /proc (Linux): descendants, their ports, liveness."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

TOKEN_ENV = "STREAMGUARD_LIFECYCLE_TOKEN"


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # Fields after the command name, which may contain spaces: state is [0], ppid [1].
    return text.rsplit(")", 1)[1].split()


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def identity(pid: int) -> tuple[int, str] | None:
    """``(pid, start time)`` of a live process, None for a dead or zombie one."""
    fields = _stat(pid)
    if fields is None or fields[0] == "Z":
        return None
    return pid, fields[19]


def alive(ident: tuple[int, str]) -> bool:
    """Whether the very process ``ident`` names is still alive (not a reused pid)."""
    return identity(ident[0]) == ident


def _has_token(pid: int, token: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{TOKEN_ENV}={token}".encode() in environ.split(b"\0")


def started_by(root: int, token: str) -> set[tuple[int, str]]:
    """Every live process below ``root`` (not ``root`` itself), or carrying ``token`` in its
    environment (which catches one already reparented away from the tree)."""
    parents: dict[int, int] = {}
    for pid in _all_pids():
        fields = _stat(pid)
        if fields is not None and fields[0] != "Z":
            parents[pid] = int(fields[1])
    found: set[int] = set()
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if pid not in found and (ppid == root or ppid in found):
                found.add(pid)
                changed = True
    found |= {pid for pid in parents if pid != root and _has_token(pid, token)}
    return {ident for pid in found if (ident := identity(pid)) is not None}


def _listening_inodes() -> dict[str, int]:
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                inodes[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
    return inodes


def listening_ports(pids: set[tuple[int, str]]) -> set[int]:
    """The TCP ports these processes listen on now."""
    inodes = _listening_inodes()
    ports: set[int] = set()
    for pid, _ in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                ports.add(inodes[link[8:-1]])
    return ports


def ports_listening_now() -> set[int]:
    """Every TCP port in LISTEN state on this host now."""
    return set(_listening_inodes().values())


def wait_until(condition: Callable[[], bool], deadline: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` at ``deadline`` (monotonic)."""
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
