"""Small socket buffers for the upstream connections of a throttled proxy (an extension of
ours; Toxiproxy leaves the kernel's defaults; docs/faults.md, "Which buffers a slow reader
fills").

A ``bandwidth`` toxic paces what the proxy forwards, so the proxy stops reading the upstream,
and the upstream server's writes wait once the bytes between it and the proxy fill the
buffers. On loopback Linux sizes those buffers from the segment size: the server's send buffer
grew to megabytes (4,194,304 bytes measured) and the proxy's receive buffer held 128 KiB and
more, so a reader of 2 KB/s never made a server's writes wait on an answer under megabytes. A
connection opened while a downstream ``bandwidth`` toxic is on therefore dials the upstream
with about half a second of the rate as ``SO_RCVBUF`` and, under :data:`CLAMP_BELOW` bytes of
it, a ``TCP_MAXSEG`` of a quarter of that, which the SYN announces: the server's kernel sizes
its send buffer from the peer's segment size, so that buffer stays at tens of kilobytes (a
window under two segments would wait for the sender's 200 ms zero-window probes).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

from .toxics import Direction, ProxyToxic

#: Seconds of a downstream ``bandwidth`` toxic's rate that the upstream socket's receive
#: buffer holds.
BUFFER_SECONDS: Final = 0.5
#: The least receive buffer asked for (the kernel doubles it).
MIN_RCVBUF: Final = 1024
#: Receive buffers under this many bytes also clamp the segment size.
CLAMP_BELOW: Final = 64 * 1024
_MSS_RANGE: Final = (256, 1460)

_P = TypeVar("_P", bound=asyncio.BaseProtocol)


def throttled_rcvbuf(toxics: Sequence[ProxyToxic]) -> int | None:
    """The upstream receive buffer for a connection opened under ``toxics``: about
    :data:`BUFFER_SECONDS` of the slowest downstream ``bandwidth`` toxic's rate (``rate`` is
    KB/s, 1 KB = 1000 bytes), at least :data:`MIN_RCVBUF`; None without such a toxic."""
    rates = [
        toxic.attr("rate")
        for toxic in toxics
        if toxic.type.name == "bandwidth" and toxic.direction is Direction.DOWNSTREAM
    ]
    if not rates:
        return None
    return max(MIN_RCVBUF, int(min(rates) * 1000 * BUFFER_SECONDS))


def throttled_options(rcvbuf: int) -> list[tuple[int, int, int]]:
    """The socket options set before the upstream connect for a receive buffer of
    ``rcvbuf`` bytes."""
    options = [(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)]
    if rcvbuf < CLAMP_BELOW:
        low, high = _MSS_RANGE
        options.append((socket.IPPROTO_TCP, socket.TCP_MAXSEG, min(max(rcvbuf // 4, low), high)))
    return options


async def dial_throttled(
    factory: Callable[[], _P], host: str, port: int, rcvbuf: int
) -> tuple[asyncio.BaseTransport, _P]:
    """``loop.create_connection(factory, host, port)`` from a socket with
    :func:`throttled_options` set before the connect (each address in turn, as
    ``create_connection`` tries them); an option the kernel refuses is left at its default."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            for level, name, value in throttled_options(rcvbuf):
                with contextlib.suppress(OSError):
                    sock.setsockopt(level, name, value)
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return await loop.create_connection(factory, sock=sock)
    raise error or OSError(f"no address for {host}:{port}")
