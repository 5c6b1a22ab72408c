"""The single-stream client's connection and stamps (issue 28): a plain-HTTP stream goes
through the load's lean transport (kernel stamps, the connection's local port), an ``https``
one through httpx's own transport, which says its stamps are the client's.

A one-connection server on a real socket records the client's port as it accepted it, so the
trace's ``local`` is checked against what the server saw. ``benchmarks/wire.py --check``
(tests/stream/test_wire_check.py) checks the same stream's stamps against a packet capture.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.stream import client
from pytest_streamguard.stream.client import StreamRecorder, read_stream
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.stream.trace import StreamTrace

PIECES = [b"one ", b"two ", b"three"]


class OneShot:
    """Serves one request on 127.0.0.1 (TLS with ``context``): a close-delimited body of
    PIECES, 30 ms apart; ``peer`` is the client's port as accepted."""

    def __init__(
        self,
        context: ssl.SSLContext | None = None,
        bulk: bytes = b"",
        together: bool = False,
        pause: float = 0.03,
    ) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.context = context
        # ``bulk``: sent in one sendall instead of PIECES, through a small send buffer;
        # ``sent_ns`` is when that sendall returned (the kernel took the last byte).
        self.bulk = bulk
        # ``together``: the response head and the first piece in one write (one segment).
        self.together = together
        # ``pause``: the server's silence before each piece.
        self.pause = pause
        self.sent_ns: int | None = None
        self.peer: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, address = self.listener.accept()
            self.peer = address[1]
            if self.context is not None:
                conn = self.context.wrap_socket(conn, server_side=True)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(body) < length:
                    body += conn.recv(65536)
                head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n"
                pieces = [] if self.bulk else PIECES
                if self.together:
                    head, pieces = head + pieces[0], pieces[1:]
                conn.sendall(head)
                if self.bulk:
                    conn.sendall(self.bulk)
                    self.sent_ns = time.perf_counter_ns()
                for piece in pieces:
                    time.sleep(self.pause)  # the server's pacing, not a synchronisation
                    conn.sendall(piece)
        except BaseException as exc:
            self.error = exc

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def read(url: str, proxy_pid: int | None = None) -> StreamTrace:
    request = StreamRequest(
        "POST", url + "/generate", json_body={"x": 1}, format="raw", proxy_pid=proxy_pid
    )
    return read_stream(StreamRecorder(request, "stream 1"))


def test_plain_http_stream_names_its_connection_and_takes_the_kernels_stamps() -> None:
    server = OneShot()
    try:
        trace = read(f"http://127.0.0.1:{server.port}")
    finally:
        server.close()
    assert server.error is None, server.error
    assert trace.completed, trace.error
    assert trace.text == "one two three"
    # The port the server accepted the stream's connection from.
    assert trace.local == f"127.0.0.1:{server.peer}"
    assert trace.stamps == ("kernel" if sys.platform.startswith("linux") else "loop")
    # Stamped when the request's last byte left, after the connect, not when the read began.
    assert trace.queued_ns is not None
    assert trace.queued_ns <= trace.request_ns
    assert len(trace.read_delay_ns) >= len(PIECES)


def test_each_read_after_a_silence_keeps_the_named_processs_wait_for_a_cpu_over_it() -> None:
    # The process named as the embedded Toxiproxy (here this one): its threads' run-queue time
    # and the host's steal over each silence of 50 ms or more, by the stamp of the read that
    # ended it (at most every thread and CPU waiting all of it); the head, sent at once, ended
    # none. Without a pid, nothing is read.
    for pid in (os.getpid(), None):
        server = OneShot(pause=0.08)
        try:
            trace = read(f"http://127.0.0.1:{server.port}", proxy_pid=pid)
        finally:
            server.close()
        assert server.error is None, server.error
        assert trace.text == "one two three"
        if pid is None:
            assert trace.proxy_waits == []
            continue
        assert [stamp for stamp, _ in trace.proxy_waits] == [c.stamp_ns for c in trace.chunks]
        most = len(os.listdir("/proc/self/task")) + (os.cpu_count() or 1)
        ends = [trace.request_ns, *(stamp for stamp, _ in trace.proxy_waits)]
        for start, (end, waited) in zip(ends, trace.proxy_waits, strict=False):
            assert 0 <= waited <= most * (end - start), trace.proxy_waits


def test_a_head_and_first_chunk_in_one_segment_keep_their_order() -> None:
    # The head is stamped by the read that completed it, as the chunk is: before, the head
    # was stamped when the client got round to it, after the kernel's stamp of that same
    # segment, and the timeline showed chunk 0 before the response headers.
    server = OneShot(together=True)
    try:
        trace = read(f"http://127.0.0.1:{server.port}")
    finally:
        server.close()
    assert server.error is None, server.error
    assert trace.text == "one two three"
    assert trace.response_ns is not None
    assert trace.request_ns <= trace.response_ns <= trace.chunks[0].stamp_ns
    lines = trace.timeline().splitlines()
    head = next(i for i, line in enumerate(lines) if "response headers (200)" in line)
    first = next(i for i, line in enumerate(lines) if "chunk 0 " in line)
    assert head < first, lines


def test_a_slow_readers_backpressure_reaches_the_server() -> None:
    # 4 MB read at 1 MB/s: the reader never runs ahead of its rate, so the server's sendall can
    # only return once all but what the buffers hold has been taken (the reader's receive
    # buffer, 0.5 s of its rate doubled by the kernel: 1 MB; the transport's unread 64 KB and
    # one 64 KB read; the server's 16 KB send buffer): not before 2.8 s, however busy the
    # machine (a busy one only makes it later). A transport that reads the socket regardless
    # of the reader let the sendall return after 1.9 s on this machine (the small send buffer
    # waits on the reader's kernel's ACKs), 3.2 s with the pause. The bound asserted is 2.5 s.
    rate, size = 1_000_000, 4_000_000
    server = OneShot(bulk=b"x" * size)
    request = StreamRequest(
        "POST",
        f"http://127.0.0.1:{server.port}/generate",
        json_body={},
        format="raw",
        slow_reader_bps=rate,
        limits=client.ReadLimits(30.0, 30.0, 60.0),
    )
    try:
        trace = read_stream(StreamRecorder(request, "slow"))
    finally:
        server.close()
    assert server.error is None, server.error
    assert trace.completed, trace.error
    assert trace.nbytes == size
    assert server.sent_ns is not None
    assert (server.sent_ns - trace.request_ns) / 1e9 > 2.5


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1, trusted by the client through SSL_CERT_FILE
    (read by httpx's SSL context, which the client builds once per process)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    tls_context.cache_clear()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    yield context
    tls_context.cache_clear()


def test_https_stream_falls_back_to_httpx_and_says_its_stamps_are_the_clients(
    tls: ssl.SSLContext,
) -> None:
    server = OneShot(tls)
    try:
        trace = read(f"https://127.0.0.1:{server.port}")
    finally:
        server.close()
    assert server.error is None, server.error
    assert trace.completed, trace.error
    assert trace.text == "one two three"
    assert trace.stamps == "client"
    assert trace.local == f"127.0.0.1:{server.peer}"
    # No transmit stamp: the request is stamped when the read began.
    assert trace.queued_ns is None
