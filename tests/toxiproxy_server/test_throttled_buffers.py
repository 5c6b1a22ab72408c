"""A connection opened while a downstream ``bandwidth`` toxic is on dials the upstream with small
buffers (toxiproxy_server/buffers.py, issue 38): the upstream sees a clamped segment size and so
keeps a small send buffer; without the toxic, or with an upstream one, it keeps the kernel's
defaults. The bytes still arrive whole and in order."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import httpx
import pytest
from toxiproxy_helpers import connect, recv_exactly

from pytest_streamguard.toxiproxy_server.buffers import (
    CLAMP_BELOW,
    MIN_RCVBUF,
    throttled_options,
)

ANSWER = bytes(range(256)) * 4


class Seen:
    """What the upstream's accepted socket says of the connection, and the answer it sends."""

    def __init__(self) -> None:
        self.mss: list[int] = []
        self.ready = threading.Event()

    def handler(self, conn: socket.socket) -> None:
        self.mss.append(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG))
        self.ready.set()
        if conn.recv(8):
            conn.sendall(ANSWER)


def _upstream_mss(
    api: httpx.Client, proxy: Callable[..., str], toxic: dict[str, object] | None
) -> int:
    seen = Seen()
    listen = proxy(handler=seen.handler)
    if toxic is not None:
        response = api.post("/proxies/p/toxics", json=toxic)
        assert response.status_code == 200, response.text
    with connect(listen, timeout=10) as sock:
        sock.sendall(b"go")
        assert recv_exactly(sock, len(ANSWER)) == ANSWER
    assert seen.ready.wait(5)
    (mss,) = seen.mss
    return mss


@pytest.mark.parametrize("rate_kb", [1, 2, 25])
def test_under_a_downstream_bandwidth_toxic_the_upstream_sees_a_small_segment_size(
    api: httpx.Client, proxy: Callable[..., str], rate_kb: int
) -> None:
    toxic = {"type": "bandwidth", "stream": "downstream", "attributes": {"rate": rate_kb}}
    mss = _upstream_mss(api, proxy, toxic)
    # The kernel takes a few bytes of options off what the SYN announced.
    assert 200 <= mss <= 1460, mss


@pytest.mark.parametrize(
    "toxic",
    [None, {"type": "bandwidth", "stream": "upstream", "attributes": {"rate": 2}}],
    ids=["no toxic", "upstream bandwidth"],
)
def test_otherwise_the_upstream_keeps_loopbacks_segment_size(
    api: httpx.Client, proxy: Callable[..., str], toxic: dict[str, object] | None
) -> None:
    assert _upstream_mss(api, proxy, toxic) > 16_000


def test_the_options_follow_the_receive_buffer() -> None:
    small = dict(((level, name), value) for level, name, value in throttled_options(MIN_RCVBUF))
    assert small[(socket.SOL_SOCKET, socket.SO_RCVBUF)] == MIN_RCVBUF
    assert small[(socket.IPPROTO_TCP, socket.TCP_MAXSEG)] == 256
    middle = dict(((level, name), value) for level, name, value in throttled_options(4000))
    assert middle[(socket.IPPROTO_TCP, socket.TCP_MAXSEG)] == 1000
    assert (
        dict(((lv, nm), v) for lv, nm, v in throttled_options(60_000))[
            (socket.IPPROTO_TCP, socket.TCP_MAXSEG)
        ]
        == 1460
    )
    # A fast toxic's buffer is large: no clamp, which would cost a segment per few hundred bytes.
    big = throttled_options(CLAMP_BELOW)
    assert [name for _, name, _ in big] == [socket.SO_RCVBUF]
