"""Helpers for the embedded Toxiproxy tests: the server subprocess and small TCP upstreams."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 20.0


@dataclass
class ServerProcess:
    """A running ``python -m pytest_streamguard.toxiproxy_server`` and what it printed."""

    popen: subprocess.Popen[str]
    port: int
    startup: dict[str, str]
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The API base URL."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        """Signal the server and wait for it; returns the exit status."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)
            raise
        finally:
            for reader in self.readers:
                reader.join(5)
            for stream in (self.popen.stdout, self.popen.stderr):
                if stream is not None:
                    stream.close()


def start_server(*args: str) -> ServerProcess:
    """Start the server with ``-port 0`` plus ``args``; read the port from the startup line."""
    popen = subprocess.Popen(
        [sys.executable, "-m", "pytest_streamguard.toxiproxy_server", "-port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "LOG_LEVEL": "info"},
    )
    found: list[str] = []
    errors: list[str] = []
    ready = threading.Event()

    def drain_stdout() -> None:
        assert popen.stdout is not None
        for line in popen.stdout:
            found.append(line)
            if "Starting Toxiproxy HTTP server" in line:
                ready.set()
        ready.set()

    def drain_stderr() -> None:
        assert popen.stderr is not None
        errors.extend(popen.stderr)

    readers = [
        threading.Thread(target=drain_stdout, daemon=True),
        threading.Thread(target=drain_stderr, daemon=True),
    ]
    for reader in readers:
        reader.start()
    ready.wait(STARTUP_TIMEOUT_S)
    startup_lines = [line for line in found if "Starting Toxiproxy HTTP server" in line]
    process = ServerProcess(popen, 0, {}, found, errors, readers)
    if not startup_lines:
        status = process.stop(signal.SIGKILL)
        raise AssertionError(
            f"server did not start (exit {status}): stdout={found!r} stderr={errors!r}"
        )
    process.startup = json.loads(startup_lines[0])
    process.port = int(process.startup["port"])
    return process


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until true, failing with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


class Upstream:
    """A threaded TCP server on 127.0.0.1:0 running ``handler(conn)`` per connection."""

    def __init__(self, handler: Callable[[socket.socket], None]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.handler = handler
        self.accepted = 0
        self.conns: list[socket.socket] = []
        self._closed = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.conns.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self.handler(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._closed = True
        self.sock.close()
        for conn in self.conns:
            conn.close()


def echo(conn: socket.socket) -> None:
    """Send back whatever arrives, until EOF."""
    while data := conn.recv(65536):
        conn.sendall(data)


def connect(listen: str, timeout: float = 5.0) -> socket.socket:
    """A client socket to a proxy's ``listen`` address."""
    host, port = listen.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    """Read exactly ``size`` bytes or fail on EOF."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise AssertionError(f"EOF after {len(data)} of {size} bytes")
        data += chunk
    return data


def recv_all(sock: socket.socket) -> bytes:
    """Read until EOF."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data
