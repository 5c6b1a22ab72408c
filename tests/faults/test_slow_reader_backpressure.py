"""A slow reader pushes back within kilobytes (issue 38): ``faults.slow_reader(2000)`` through
the embedded Toxiproxy makes a server's writes wait on a small answer, so a server with a 1 s
write timeout is exposed by it.

The server here is a real TCP server in a thread of this process: one blocking socket per
connection, an SSE answer of ``bytes`` bytes in 256-byte events written as fast as each
``sendall`` returns, all of it within a write deadline of 1 s (Go's ``http.Server``
``WriteTimeout``); past it the server records the timeout and aborts the connection with an RST
(nginx's ``reset_timedout_connection on``). ``sndbuf`` sets the socket's ``SO_SNDBUF`` (nginx's
``listen ... sndbuf=``); without it the kernel's defaults apply. Before issue 38 the proxy's
loopback buffers absorbed megabytes: a 2 KB/s reader exposed this timeout only on an 8 MB
answer. Now the server's writes wait once about 8 KB (a 4 KiB send buffer) or a few tens of KB
(the kernel's default send buffer, which the proxy keeps small) are in flight, and the proxy
drains 2.5 KB/s (its bandwidth toxic runs 1.25 times the reader's rate), so an answer of that
plus more than 2.5 KB misses a 1 s deadline: 16 KB and 128 KiB here, with margin. How many
bytes it takes is measured in benchmarks/slow_reader_backpressure.py (docs/faults.md, "Which
buffers a slow reader fills"), not asserted here.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import pytest
from plugin_helpers import streamguard_runner

WRITE_TIMEOUT_S = 1.0
EVENT = b"data: " + b"x" * 248 + b"\n\n"
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"connection: close\r\n\r\n"
)


@dataclass
class WriteTimeoutServer:
    """Answers ``GET /readyz`` with 200 and any other request with the SSE answer; keeps, per
    answer path, whether its write deadline passed and how many bytes were written by then."""

    listener: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))
    timed_out: dict[str, int] = field(default_factory=dict)
    completed: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                data = conn.recv(4096)
                if not data:
                    return
                request += data
            target = request.split(b" ", 2)[1].decode()
            if target == "/readyz":
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                return
            query = {k: int(v[0]) for k, v in parse_qs(urlsplit(target).query).items()}
            if "sndbuf" in query:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, query["sndbuf"])
            self._write(conn, target, query["bytes"])

    def _write(self, conn: socket.socket, target: str, size: int) -> None:
        deadline = time.monotonic() + WRITE_TIMEOUT_S
        written = 0
        try:
            for piece in [HEAD] + [EVENT] * (size // len(EVENT)) + [b"event: done\ndata: {}\n\n"]:
                conn.settimeout(max(deadline - time.monotonic(), 0.001))
                conn.sendall(piece)
                written += len(piece)
        except TimeoutError:
            self.timed_out[target] = written
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        except OSError:
            return
        self.completed.add(target)


@pytest.fixture
def write_timeout_server() -> Iterator[WriteTimeoutServer]:
    server = WriteTimeoutServer()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        # Closing a listener does not wake a thread blocked in its accept() on Linux (the join
        # waited its whole 5 s); shutting it down does, with an OSError that ends serve().
        server.listener.shutdown(socket.SHUT_RDWR)
        server.listener.close()
        thread.join(5)
        assert not thread.is_alive(), "the server's accept loop did not end"


EXPOSED = """
import pytest

@pytest.mark.parametrize(
    "path",
    [
        # 16 KB from a server with a 4 KiB send buffer (as nginx's listen sndbuf=4k sets).
        "/answer?bytes=16000&sndbuf=4096",
        # 128 KiB from a server with the kernel's default buffers.
        "/answer?bytes=131072",
    ],
)
def test_a_2kbps_reader_makes_the_server_wait(streamguard, path):
    streamguard.faults.slow_reader(2000)
    trace = streamguard.stream(path, read_timeout=30)
    # The server gave up writing and reset the connection: what it had sent arrives, then
    # the reset, long before the whole answer could have been read at 2 KB/s.
    assert not trace.completed
    assert trace.error_kind == "reset", (trace.error_kind, trace.error)
    assert streamguard.faults.judge(streamguard.traces) == []

def test_a_normal_reader_gets_the_answer_in_time(streamguard):
    trace = streamguard.stream("/answer?bytes=131072&normal=1", read_timeout=30)
    assert trace.completed, trace.error
"""


def test_a_2kbps_reader_exposes_a_1s_write_timeout_on_a_small_answer(
    pytester: pytest.Pytester, toxiproxy_url: str, write_timeout_server: WriteTimeoutServer
) -> None:
    run: Callable[..., pytest.RunResult] = streamguard_runner(
        pytester, toxiproxy_url, write_timeout_server.url
    )
    pytester.makepyfile(test_exposed=EXPOSED)
    result = run("--streamguard-ready-path", "/readyz", "-v")
    result.assert_outcomes(passed=3)
    timed_out = write_timeout_server.timed_out
    assert set(timed_out) == {"/answer?bytes=16000&sndbuf=4096", "/answer?bytes=131072"}
    # It waited before the end of its answer, not on its last bytes.
    assert timed_out["/answer?bytes=16000&sndbuf=4096"] < 16000
    assert timed_out["/answer?bytes=131072"] < 131072
    assert write_timeout_server.completed == {"/answer?bytes=131072&normal=1"}
