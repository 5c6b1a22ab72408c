"""A target that resets a stream is read as a reset through the embedded proxy, as it is when
read directly (issue 20): the proxy passes an upstream reset on as an RST, where real Toxiproxy
closes the client's connection cleanly (docs/toxiproxy.md, "Resets")."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

import httpx
import pytest
from toxiproxy_helpers import Upstream

from pytest_streamguard.stream.client import StreamRecorder, read_stream
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.stream.trace import StreamTrace

LINES = [b'{"token": "a"}\n', b'{"token": "b"}\n']
# HTTP/1.0: the body ends when the connection does, so only a reset tells it was cut.
CLOSE_DELIMITED = b"HTTP/1.0 200 OK\r\ncontent-type: application/x-ndjson\r\n\r\n" + b"".join(LINES)
CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%s\r\n" % (len(line), line) for line in LINES)
)


class ResettingTarget:
    """Answers every request with ``head`` and resets the connection (SO_LINGER 0, close) once
    the reader under test has seen both lines, so the reset cannot overtake them."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.seen = threading.Event()
        self.upstream = Upstream(self._answer)

    def _answer(self, conn: socket.socket) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            data = conn.recv(65536)
            if not data:
                return
            request += data
        conn.sendall(self.head)
        self.seen.wait(10)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def read(self, address: str) -> StreamTrace:
        """Read one stream from ``address`` (the target, or a proxy in front of it)."""
        self.seen.clear()

        def on_chunk(trace: StreamTrace) -> None:
            if len(trace.chunks) == len(LINES):
                self.seen.set()

        request = StreamRequest("GET", f"http://{address}/stream", format="ndjson")
        return read_stream(StreamRecorder(request, "reset", on_chunk=on_chunk))


@pytest.mark.parametrize("head", [CLOSE_DELIMITED, CHUNKED], ids=["close-delimited", "chunked"])
def test_an_upstream_reset_reaches_the_client_as_a_reset(
    api: httpx.Client, upstream: Callable[..., Upstream], head: bytes
) -> None:
    target = ResettingTarget(head)
    try:
        direct = target.read(target.upstream.address)
        body = {"name": "p", "listen": "127.0.0.1:0", "upstream": target.upstream.address}
        listen = api.post("/proxies", json=body).json()["listen"]
        proxied = target.read(listen)
    finally:
        target.upstream.close()
    assert direct.error_kind == "reset", direct.error
    assert proxied.error_kind == direct.error_kind, proxied.error
    assert not proxied.completed
    # Everything sent before the reset still arrives.
    assert [chunk.data for chunk in proxied.chunks] == [chunk.data for chunk in direct.chunks]
    assert len(proxied.chunks) == len(LINES)


def test_a_clean_close_stays_a_clean_close(api: httpx.Client) -> None:
    def answer(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(CLOSE_DELIMITED)

    target = Upstream(answer)
    try:
        body = {"name": "p", "listen": "127.0.0.1:0", "upstream": target.address}
        listen = api.post("/proxies", json=body).json()["listen"]
        request = StreamRequest("GET", f"http://{listen}/stream", format="ndjson")
        trace = read_stream(StreamRecorder(request, "clean"))
    finally:
        target.close()
    assert trace.completed, trace.error
    assert len(trace.chunks) == len(LINES)
