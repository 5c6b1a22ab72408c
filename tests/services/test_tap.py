"""The tap on a stack's inner hop passes bytes on both ways as they come, stamps each read of
the answer side, and passes a FIN on as a FIN and a reset as a reset."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from polling import wait_until

from pytest_streamguard.services.tap import Exchange, Tap


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
        # No id and no head's end: the stream alone in its window is paired by time, and an
        # answer without a head's end is all head (no body byte).
        found = tap.exchange(None, before, time.perf_counter_ns(), alone=True)
        assert found is not None
        assert found.request_id is None
        assert found.reads == []
        assert tap.exchange(None, before, time.perf_counter_ns(), alone=False) is None
        tap.forget_before(time.perf_counter_ns())
        assert tap.exchange(None, before, time.perf_counter_ns(), alone=True) is None
        client.close()
        served.close()
    finally:
        tap.close()


def test_both_sockets_of_a_connection_send_small_writes_at_once(upstream: socket.socket) -> None:
    """TCP_NODELAY on the tap's two sockets of each connection: with Nagle's algorithm on the
    one it accepted (asyncio's default there), an answer's body waited for the ACK of its head,
    which the reader's kernel may delay 40 ms."""
    tap = Tap(_address(upstream))
    try:
        client = _connect(tap)
        served, _ = upstream.accept()
        wait_until(lambda: len(tap._open) == 2, 10.0, "the tap to open its upstream side")
        sockets = [writer.get_extra_info("socket") for writer in list(tap._open)]
        assert [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in sockets] == [1, 1]
        client.close()
        served.close()
    finally:
        tap.close()


def test_each_request_is_an_exchange_found_by_its_id(upstream: socket.socket) -> None:
    """Two requests on one kept-alive connection: each is found by its id (x-request-id, or a
    traceparent's trace id), its body stamped without its head, and the side that closed
    first is the one that ended the last."""
    tap = Tap(_address(upstream))
    try:
        client = _connect(tap)
        served, _ = upstream.accept()
        client.sendall(b"POST /a HTTP/1.1\r\nX-Request-Id: one\r\n\r\n{}")
        assert served.recv(100).endswith(b"{}")
        served.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
        assert client.recv(100).startswith(b"HTTP/1.1")
        served.sendall(b"body")
        assert client.recv(100) == b"body"
        trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
        client.sendall(
            f"GET /b HTTP/1.1\r\ntraceparent: 00-{trace_id}-00f067aa0ba902b7-01\r\n\r\n".encode()
        )
        assert served.recv(200).startswith(b"GET /b")
        served.sendall(b"HTTP/1.1 200 OK\r\n\r\nall in one")
        assert client.recv(100).endswith(b"all in one")
        client.close()
        wait_until(
            lambda: (tap.exchange(trace_id, 0, 0, alone=False) or Exchange(0)).ended is not None,
            5.0,
            "the tap to see the client close",
        )
        first = tap.exchange("one", 0, 0, alone=False)
        second = tap.exchange(trace_id, 0, 0, alone=False)
        assert first is not None
        assert second is not None
        assert [n for _, n in first.reads] == [4]
        assert first.ended is None
        assert [n for _, n in second.reads] == [10]
        assert second.ended == "front"
        assert tap.exchange("another", 0, 0, alone=False) is None
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
