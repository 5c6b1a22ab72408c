"""Child processes the plugin starts, and the one mechanism that makes sure none outlives pytest.

:class:`ManagedProcess` runs the target app and the embedded Toxiproxy server without a shell,
each in its own process group (``start_new_session``), with its output kept line by line, each
line stamped as it arrived, in a bounded :class:`~pytest_streamguard.services.output.OutputLog`
(the tail goes into the error when it fails to start; the lines a stream's window holds go into
its verdict). stderr shares stdout's pipe, so the lines are kept in the order the child wrote
them (two pipes are read in whatever order their reader threads happen to run). nginx of
:class:`~pytest_streamguard.services.ingress.Ingress` is started the same way by its own module.

Lifetime: the whole group is stopped at teardown (SIGTERM, SIGKILL after a grace period), on
Ctrl-C and at interpreter exit (``atexit``). For a pytest process that dies without any of that
(SIGKILL, a crash), every group and temporary directory is registered with a :class:`Reaper`:
one small stdlib-only process per pytest process (``_reaper.py``) holding the read end of a
pipe whose write end the kernel closes when pytest dies; on that EOF it SIGTERMs every group,
SIGKILLs what is left after a second and deletes the directories. Under pytest-xdist each
worker's reaper also watches the controller and kills the worker with it.

Not ``prctl(PR_SET_PDEATHSIG)``: it reaches only the direct child (not a target behind ``sh -c``
or nginx's workers), cannot escalate to SIGKILL or delete a directory, fires when the starting
*thread* ends, and needs a ``preexec_fn``, unsafe in a threaded parent.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import json
import os
import random
import re
import shlex
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

import httpx

from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.errors import ClientErrorAnswer, ReadyPathError, StartupError
from pytest_streamguard.services.output import OutputLog

_STOP_GRACE = 5.0
_REAPER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_reaper.py")
_URL_IN_LINE = re.compile(r"(https?://[0-9A-Za-z.\-\[\]:]+)")
_LISTENING_WORD = re.compile(r"\b(listening|running|started|serving|ready|available)\b", re.I)
# host:port after a space or bracket (so a time such as 0:00:03 is not read as a port).
_HOST_PORT_IN_LINE = re.compile(
    r"(?:^|[\s(=@,])(?P<host>\d{1,3}(?:\.\d{1,3}){3}|\[[0-9A-Fa-f:.]*\]|localhost)?"
    r":(?P<port>\d{1,5})\b"
)
_PORT_WORD_IN_LINE = re.compile(r"\bport\s*[:=]?\s*(?P<port>\d{1,5})\b", re.I)
_WILDCARD_HOST = re.compile(r"(?P<scheme>https?://)(?:0\.0\.0\.0|\[::\]|::|)?:")


#: A ready URL that answers a 4xx this long is not a server still starting up: a starting
#: server refuses connections or answers 5xx (503 is the usual "not ready yet"), while a 4xx
#: says the request is wrong, which waiting will not change. A few seconds, not one answer,
#: so a server that registers its routes just after it starts listening still gets ready.
CLIENT_ERROR_FAIL_S = 3.0
# The 4xx answers that do mean "not now": a starting server may give them.
_RETRY_LATER = frozenset({408, 425, 429})


class Reaper:
    """This pytest process's reaper (see the module docstring); :meth:`get` starts it once.

    Registrations are single lines written to a pipe; the kernel buffers them, so a line written
    just before pytest dies is still read by the reaper before the EOF."""

    _instance: Reaper | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        read_end, self._write_end = os.pipe()
        args = [sys.executable, "-I", "-S", _REAPER_SCRIPT]
        if os.environ.get("PYTEST_XDIST_WORKER"):
            # A pytest-xdist worker is a direct child of its controller (execnet popen).
            args.append(str(os.getppid()))
        try:
            self.popen = subprocess.Popen(
                args,
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                # Out of the terminal's foreground group, so Ctrl-C does not reach it.
                start_new_session=True,
            )
        finally:
            os.close(read_end)
        self.owner = os.getpid()

    @classmethod
    def get(cls) -> Reaper:
        """The reaper of this process, started on first use (again after a fork)."""
        with cls._lock:
            if cls._instance is None or cls._instance.owner != os.getpid():
                cls._instance = Reaper()
            return cls._instance

    def _send(self, line: str) -> None:
        with Reaper._lock, contextlib.suppress(OSError):
            os.write(self._write_end, (line + "\n").encode("utf-8", "surrogateescape"))

    def watch_group(self, pgid: int) -> None:
        """Stop process group ``pgid`` if this process dies before :meth:`forget_group`."""
        self._send(f"+g {pgid}")

    def forget_group(self, pgid: int) -> None:
        """The group was stopped normally; its id may be reused."""
        self._send(f"-g {pgid}")

    def watch_dir(self, path: str | os.PathLike[str]) -> None:
        """Delete directory ``path`` if this process dies before :meth:`forget_dir`."""
        self._send(f"+d {os.fspath(path)}")

    def forget_dir(self, path: str | os.PathLike[str]) -> None:
        """The directory was deleted normally."""
        self._send(f"-d {os.fspath(path)}")

    def close(self) -> None:
        """At normal exit: close the pipe and let the reaper (with nothing left to do) exit."""
        with contextlib.suppress(OSError):
            os.close(self._write_end)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5.0)

    @classmethod
    def close_instance(cls) -> None:
        """atexit: close this process's reaper, if it started one."""
        instance = cls._instance
        if instance is not None and instance.owner == os.getpid():
            cls._instance = None
            instance.close()


def stop_group(popen: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM ``popen``'s process group, SIGKILL it after ``grace`` seconds, and reap the
    leader. The group is SIGKILLed in any case at the end: a wrapper's grandchild may ignore
    SIGTERM or outlive the leader."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(grace)
    else:
        # The leader is gone; give the rest of its group the same SIGTERM-first chance.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGTERM)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago, for a command the plugin hands its port (a user's
    ``{port}``, nginx); the bundled target and the embedded server bind port 0 themselves.

    Drawn at random below the kernel's ephemeral range (``ip_local_port_range``), from
    :data:`FREE_PORT_LOW`, and checked by binding it: every other process's port-0 bind draws
    from that range, and took a port handed over this way once (Errno 98 in a fresh clone's
    ``make test``). The system's randomness, not ``random``'s seed, which pytest-randomly sets
    alike in every worker. Port 0 only where the range leaves no room below it."""
    high = _ephemeral_low()
    for _ in range(FREE_PORT_TRIES if high - FREE_PORT_LOW >= 1000 else 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, _RANDOM.randrange(FREE_PORT_LOW, high)))
            except OSError:
                continue  # taken (or in TIME_WAIT): draw again
            return int(sock.getsockname()[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


#: :func:`free_port` draws from this port up to the ephemeral range's start.
FREE_PORT_LOW = 10_000
FREE_PORT_TRIES = 50
_RANDOM = random.SystemRandom()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768, Linux's default, where
    it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as bounds:
            return int(bounds.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def poll_until_ok(
    url: str,
    timeout: float,
    *,
    before_each: Callable[[str], None] | None = None,
    pause: Callable[[], None] | None = None,
    client_error_fail_s: float | None = None,
) -> str | None:
    """GET ``url`` until it answers 2xx: None then, else the last failure once ``timeout``
    seconds are over. ``before_each(last)`` may raise to stop early; ``pause`` waits between
    tries (50 ms by default). With ``client_error_fail_s``, a 4xx answered for that long
    (408, 425 and 429 aside) raises :class:`ClientErrorAnswer` instead of waiting on."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    client_error_since: float | None = None
    with httpx.Client(timeout=2.0, verify=tls_context()) as client:
        while True:
            if before_each is not None:
                before_each(last)
            try:
                response = client.get(url)
                if response.is_success:
                    return None
                last = f"HTTP {response.status_code}"
                if response.is_client_error and response.status_code not in _RETRY_LATER:
                    now = time.monotonic()
                    if client_error_since is None:
                        client_error_since = now
                    if client_error_fail_s is not None and (
                        now - client_error_since >= client_error_fail_s
                    ):
                        raise ClientErrorAnswer(response.status_code, client_error_fail_s)
                else:
                    client_error_since = None
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                client_error_since = None
            if time.monotonic() >= deadline:
                return last
            if pause is not None:
                pause()
            else:
                time.sleep(0.05)


class ManagedProcess:
    """A started child with drained output, a way to wait for a line, and a sure stop."""

    _live: set[ManagedProcess] = set()  # noqa: RUF012 -- process-wide registry for atexit
    _live_lock = threading.Lock()

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        output: OutputLog | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        # What it was started with, to start it again the same way (Target.restart).
        self.env = dict(env or {})
        self.cwd = cwd
        # A restarted process goes on writing into the log of the one it replaces.
        self.output = output if output is not None else OutputLog(name)
        self._new_line = self.output.changed
        full_env = dict(os.environ)
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env.update(env or {})
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise StartupError(f"{name}: could not start {shlex.join(self.argv)}: {exc}") from None
        Reaper.get().watch_group(self.popen.pid)
        with ManagedProcess._live_lock:
            ManagedProcess._live.add(self)
        self._reader = threading.Thread(
            target=self.output.drain, args=(self.popen.stdout,), daemon=True
        )
        self._reader.start()

    @property
    def pid(self) -> int:
        """The child's process id (also its process group id)."""
        return self.popen.pid

    def tail(self) -> str:
        """The last lines of the child's output (stdout and stderr, as written)."""
        return self.output.tail()

    def failure(self, what: str) -> StartupError:
        """A StartupError naming the command, what went wrong and the output tail."""
        if (code := self.popen.poll()) is not None:
            self._reader.join(2.0)  # its last words: an exit can be seen before they are read
        status = "still running" if code is None else f"exit code {code}"
        return StartupError(
            f"{self.name} {what} ({status}); command: {shlex.join(self.argv)}\n"
            f"--- last output of {self.name} ---\n{self.tail()}"
            + (f"\n({losses})" if (losses := self.output.losses()) else "")
        )

    def wait_for_line(
        self,
        match: Callable[[str], str | None],
        timeout: float,
        *,
        probe: Callable[[], str | None] | None = None,
        waiting_for: str = "printed no listening line",
    ) -> str:
        """Wait until a line of output makes ``match`` return a value; return that value.

        ``probe``, when given, is asked too between lines (every 0.2 s at most), and its first
        value is returned in the same way; ``waiting_for`` words the time-out."""
        deadline = time.monotonic() + timeout
        checked = 0
        with self._new_line:
            while True:
                lines, checked = self.output.since(checked)
                for line in lines:
                    if (found := match(line)) is not None:
                        return found
                if probe is not None and (probed := probe()) is not None:
                    return probed
                if self.popen.poll() is not None and not self._reader.is_alive():
                    raise self.failure("exited before printing its listening line")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self.failure(f"{waiting_for} within {timeout:g} s")
                self._new_line.wait(min(left, 0.2))

    def wait_ready(
        self, url: str, timeout: float, *, client_error_fail_s: float | None = None
    ) -> None:
        """Poll ``url`` until it answers 2xx; fail early if the process exits, or (with
        ``client_error_fail_s``) with :class:`ReadyPathError` if it keeps answering a 4xx."""

        def still_running(last: str) -> None:
            if self.popen.poll() is not None:
                raise self.failure(f"exited before {url} answered 2xx (last: {last})")

        def pause() -> None:
            with self._new_line:
                # Wake early when the child prints or exits; otherwise poll every 50 ms.
                self._new_line.wait(0.05)

        try:
            last = poll_until_ok(
                url,
                timeout,
                before_each=still_running,
                pause=pause,
                client_error_fail_s=client_error_fail_s,
            )
        except ClientErrorAnswer as answer:
            failure = self.failure(
                f"answered HTTP {answer.status} at {url} for {answer.seconds:g} s: a 4xx "
                "means the path is wrong, not that the app is still starting"
            )
            raise ReadyPathError(str(failure)) from None
        if last is not None:
            raise self.failure(f"was not ready at {url} within {timeout:g} s (last: {last})")

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after a grace period, and reap the child."""
        try:
            stop_group(self.popen, _STOP_GRACE)
            Reaper.get().forget_group(self.popen.pid)
        finally:
            self._reader.join(1.0)
            if self.popen.stdout is not None:
                self.popen.stdout.close()
            with ManagedProcess._live_lock:
                ManagedProcess._live.discard(self)

    def kill(self) -> None:
        """SIGKILL the process group at once, as a crash would end it (no SIGTERM first)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)

    @classmethod
    def stop_all(cls) -> None:
        """Stop every process still running (atexit backstop)."""
        with cls._live_lock:
            live = list(cls._live)
        for process in live:
            process.stop()


# atexit runs handlers last-registered first: stop the processes, then close the reaper.
atexit.register(Reaper.close_instance)
atexit.register(ManagedProcess.stop_all)


def listening_url(line: str) -> str | None:
    """The URL in a listening line, as the usual servers word it.

    The plugin's own JSON line (its ``url`` field), or a line that says it listens (listening,
    running, started, serving, ready, available) and names a URL, a ``host:port`` or a
    ``port N``: uvicorn's ``Uvicorn running on http://...``, Node's and Express's
    ``listening on http://...``, Fastify's ``Server listening at ...``, Next.js's ``ready -
    started server on 0.0.0.0:3000``, Go's ``Listening on :8080``, Spring's ``Tomcat started on
    port 8080 (http)``. A wildcard address (``0.0.0.0``, ``::``, none) is reached on 127.0.0.1."""
    stripped = line.strip()
    if stripped.startswith("{"):
        try:
            # Only the object at the start: print() writes the text and its newline separately,
            # and stderr shares the pipe, so another thread's log line can land in between.
            parsed, _ = json.JSONDecoder().raw_decode(stripped)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("url"), str):
            return _reachable(str(parsed["url"]).rstrip("/"))
    if not _LISTENING_WORD.search(stripped):
        return None
    found = _URL_IN_LINE.search(stripped)
    if found:
        return _reachable(found.group(1).rstrip("/"))
    address = _HOST_PORT_IN_LINE.search(stripped) or _PORT_WORD_IN_LINE.search(stripped)
    if address is None:
        return None
    host = address.groupdict().get("host") or ""
    port = int(address.group("port"))
    if not 0 < port < 65536:
        return None
    return _reachable(f"http://{host}:{port}")


def _reachable(url: str) -> str:
    """``url`` with a wildcard or missing host replaced by 127.0.0.1, where a client can dial."""
    return _WILDCARD_HOST.sub(r"\g<scheme>127.0.0.1:", url, count=1)


def listening_sockets(pgid: int) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each TCP socket in LISTEN state held by any process of the
    process group ``pgid`` (Linux), the host as a client dials it.

    Read from ``/proc``: the socket inodes among each group member's open files, matched with
    ``/proc/net/tcp`` and ``tcp6``. A wildcard address (``0.0.0.0``, ``::``) is reached on
    127.0.0.1, an IPv4-mapped one on its IPv4 address, any other IPv6 one in brackets; an app
    bound to 127.0.0.2 is dialled there, not on 127.0.0.1. Elsewhere (no ``/proc``) the list
    is empty, and the port must come from ``{port}`` or a listening line. Sorted, without
    duplicates."""
    inodes: set[str] = set()
    try:
        pids = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
                # The fields after the parenthesised command name: state ppid pgrp ...
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except (OSError, IndexError, ValueError):
            continue  # the process ended meanwhile, or is not ours to read
    found: set[tuple[str, int]] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as rows:
                next(rows, None)
                for row in rows:
                    columns = row.split()
                    # local_address is HEXADDR:HEXPORT; state 0A is LISTEN; column 9 the inode.
                    if len(columns) > 9 and columns[3] == "0A" and columns[9] in inodes:
                        address, port = columns[1].rsplit(":", 1)
                        found.add((_proc_net_host(address), int(port, 16)))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda hostport: (hostport[1], hostport[0]))


def _proc_net_host(address: str) -> str:
    """The host a client dials for a ``/proc/net/tcp{,6}`` local address (hex, each 32-bit
    word in the machine's byte order): ``0100007F`` is ``127.0.0.1`` on a little-endian one."""
    words = [int(address[i : i + 8], 16) for i in range(0, len(address), 8)]
    packed = struct.pack(f"={len(words)}I", *words)
    ip = ipaddress.ip_address(packed)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return "127.0.0.1"
    return f"[{ip}]" if ip.version == 6 else str(ip)


def toxiproxy_listening(line: str) -> str | None:
    """The API URL in toxiproxy's zerolog startup line (host and port fields)."""
    stripped = line.strip()
    if not stripped.startswith("{") or "Starting Toxiproxy HTTP server" not in stripped:
        return None
    try:
        parsed = json.loads(stripped)
    except ValueError:
        return None
    host, port = parsed.get("host"), parsed.get("port")
    if not host or not port:
        return None
    return f"http://{host}:{port}"
