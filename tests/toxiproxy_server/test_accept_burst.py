"""A burst of connections opened together: every one is accepted, dialled and forwarded."""

from __future__ import annotations

import os
import select
import signal
import socket
import time

import httpx
from toxiproxy_helpers import Upstream, echo, recv_exactly, start_server

from pytest_streamguard.common.tls import tls_context

BURST = 150


def test_listen_backlog_holds_a_burst_while_the_server_is_busy() -> None:
    """Go listens with the kernel's somaxconn: connections the server has not accepted yet
    wait in the kernel's queue, complete their handshake and are served once it gets to
    them. A backlog of 100 (asyncio's create_server default) leaves a third of 150 half-open."""
    target = Upstream(echo)
    process = start_server()
    socks: list[socket.socket] = []
    try:
        body = {"name": "burst", "listen": "127.0.0.1:0", "upstream": target.address}
        host, port = (
            httpx.post(f"{process.url}/proxies", json=body, verify=tls_context())
            .json()["listen"]
            .split(":")
        )
        # The server accepts nothing while stopped: only the listen queue holds the burst.
        os.kill(process.popen.pid, signal.SIGSTOP)
        try:
            for _ in range(BURST):
                sock = socket.socket()
                sock.setblocking(False)
                sock.connect_ex((host, int(port)))
                socks.append(sock)
            pending = set(socks)
            deadline = time.monotonic() + 5.0
            while pending and time.monotonic() < deadline:
                _, writable, _ = select.select([], list(pending), [], 0.2)
                pending -= set(writable)
            connected = BURST - len(pending)
        finally:
            os.kill(process.popen.pid, signal.SIGCONT)
        assert connected == BURST, f"{connected} of {BURST} handshakes completed in 5 s"
        for index, sock in enumerate(socks):
            sock.setblocking(True)
            sock.settimeout(10.0)
            sock.sendall(b"%04d" % index)
        for index, sock in enumerate(socks):
            assert recv_exactly(sock, 4) == b"%04d" % index
    finally:
        for sock in socks:
            sock.close()
        assert process.stop() == 0
        target.close()
