"""The tap on a stack's inner hop passes bytes on both ways as they come, stamps each read of
the answer side, and passes a FIN on as a FIN and a reset as a reset."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from pytest_streamguard.services.tap import Tap


@pytest.fixture
def upstream() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10.0)
    yield server
    server.close()


def _address(sock: socket.socket) -> str:
    return f"127.0.0.1:{sock.getsockname()[1]}"


def _connect(tap: Tap) -> socket.socket:
    host, port = tap.address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10.0)


def _until_end(client: socket.socket) -> str:
    """Read to the connection's end: ``fin`` (a clean end) or ``reset``."""
    try:
        while client.recv(100):
            pass
    except ConnectionResetError:
        return "reset"
    return "fin"


def test_bytes_pass_both_ways_and_the_answer_is_stamped(upstream: socket.socket) -> None:
    tap = Tap(_address(upstream))
    try:
        before = time.perf_counter_ns()
        client = _connect(tap)
        served, _ = upstream.accept()
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert served.recv(100) == b"GET / HTTP/1.1\r\n\r\n"
        served.sendall(b"first")
        assert client.recv(100) == b"first"
        served.sendall(b"second")
        served.shutdown(socket.SHUT_WR)
        got = b""
        while piece := client.recv(100):
            got += piece
        assert got == b"second"  # then the FIN: recv returned b""
        reads = tap.reads_between(before, time.perf_counter_ns())
        assert [n for _, n in reads] == [5, 6]
        assert reads[0][0] <= reads[1][0]
        tap.forget_before(time.perf_counter_ns())
        assert tap.reads_between(before, time.perf_counter_ns()) == []
        client.close()
        served.close()
    finally:
        tap.close()


def test_a_reset_is_passed_on_as_a_reset(upstream: socket.socket) -> None:
    tap = Tap(_address(upstream))
    try:
        client = _connect(tap)
        served, _ = upstream.accept()
        served.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        served.close()
        assert _until_end(client) == "reset"
        client.close()
    finally:
        tap.close()


def test_close_ends_open_connections_and_the_thread(upstream: socket.socket) -> None:
    tap = Tap(_address(upstream))
    client = _connect(tap)
    served, _ = upstream.accept()
    threads = {t.name for t in threading.enumerate()}
    assert "streamguard-tap" in threads
    tap.close()
    assert _until_end(client) in ("fin", "reset")
    assert not tap._thread.is_alive()
    client.close()
    served.close()


def test_closing_a_tap_with_an_open_connection_logs_nothing(
    upstream: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 45: close() cancels the connections it ends, and asyncio logged each cancelled
    handler as an error with a CancelledError traceback, in the captured log of every test."""
    tap = Tap(_address(upstream))
    try:
        client = _connect(tap)
        client.sendall(b"hi")
        conn, _ = upstream.accept()
        assert conn.recv(2) == b"hi"
        conn.sendall(b"hello")
        assert client.recv(5) == b"hello"
    finally:
        tap.close()
    client.close()
    conn.close()
    assert [r for r in caplog.records if r.name == "asyncio"] == []
