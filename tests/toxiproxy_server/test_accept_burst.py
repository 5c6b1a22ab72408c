"""A burst of connections opened together: every one is accepted, dialled and forwarded."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import socket
import time

import httpx
from toxiproxy_helpers import Upstream, echo, recv_exactly, start_server

from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.toxiproxy_server.proxy import bind_listener

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


def test_a_proxy_accepts_connections_with_tcp_nodelay_on_asyncios_own_loop_too() -> None:
    """A proxy's listener (served as ``Proxy.start`` serves it) hands each connection to the loop
    with TCP_NODELAY on: asyncio sets it only on IPPROTO_TCP sockets (uvloop on every one), and
    without it Nagle's algorithm holds a small write behind the ACK of the one before."""

    async def accepted_nodelay() -> int:
        sock = await bind_listener("127.0.0.1:0")
        loop = asyncio.get_running_loop()
        got: asyncio.Future[int] = loop.create_future()

        class Accepted(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                one = transport.get_extra_info("socket")
                got.set_result(one.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await loop.create_server(Accepted, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            nodelay = await asyncio.wait_for(got, 10.0)
            writer.close()
        return nodelay

    assert asyncio.run(accepted_nodelay()) == 1
