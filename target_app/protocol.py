"""uvicorn's httptools protocol with the guards a hostile client needs and uvicorn lacks.

uvicorn's own settings cover part of it: ``timeout_keep_alive`` closes a connection idle
*between* requests, and ``h11_max_incomplete_event_size`` bounds the head only under the
pure-Python h11 parser. With httptools (what ``uvicorn[standard]`` selects) nothing bounds the
size of a request head, and nothing times out a client that connects and never finishes its
head. ``uvicorn.Config(http=...)`` accepts a protocol class, so this subclass adds:

- a head size bound (431 once the head passes ``max_head_bytes``, read no further; checked on
  the raw bytes while a head is incomplete, and on the parsed head once it is complete),
- a head read timeout (408 when a request head is not complete within ``head_timeout_s``),
- the ``streamguard.connection`` ASGI scope extension, whose ``end(within_s)`` closes the
  connection once the client has taken everything written, and aborts it if that has not
  happened ``within_s`` seconds later (a slow reader's socket would otherwise stay open until
  it reads everything); it returns a future
  that is done once the connection is gone, so the app can return after that and uvicorn
  sees a disconnect rather than an unfinished response,
- and in the same extension ``progress()``: how many bytes of the responses on this connection
  the client has taken so far, and how many the server still holds for it (uvicorn's transport
  buffer plus, on Linux, the kernel's send queue from ``SIOCOUTQ``). uvicorn's ``send`` returns
  once the bytes are in the transport buffer, and blocks only while that buffer is over its
  64 KiB high-water mark; the kernel's send buffer grows to megabytes on its own, so whether a
  write returned says little about whether the client reads. These two counts do.

The body read timeout lives in the app (``validation.read_body``), where a 408 can be
an ordinary JSON answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import socket
import struct
import sys
import termios
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

CONNECTION_EXTENSION = "streamguard.connection"
"""Scope extension key: ``scope["extensions"][CONNECTION_EXTENSION]["end"](within_s)`` and
``[...]["progress"]()``."""

_CLOSE_POLL_S = 0.02
"""How often a connection being ended checks whether its client has taken the rest."""

_KERNEL_QUEUE = sys.platform.startswith("linux")
"""Whether ``SIOCOUTQ`` (``TIOCOUTQ`` on a socket) reports the kernel's unsent bytes here."""


def kernel_unsent(sock: Any) -> int:
    """Bytes in the kernel send queue of ``sock`` not yet acknowledged by the peer (0 where
    the platform cannot tell, or once the socket is closed)."""
    if not _KERNEL_QUEUE or sock is None:
        return 0
    with contextlib.suppress(OSError, ValueError):
        raw = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
        return int(struct.unpack("i", raw)[0])
    return 0


class _CountingTransport:
    """The connection's transport, counting the bytes written through it (uvicorn writes the
    chunked framing itself, so only here is the true count known)."""

    def __init__(self, inner: asyncio.Transport) -> None:
        self.inner = inner
        self.written = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Count, then write."""
        self.written += len(data)
        self.inner.write(data)

    def writelines(self, chunks: Any) -> None:
        """Count, then write each chunk."""
        for chunk in chunks:
            self.write(chunk)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def guarded_protocol(max_head_bytes: int, head_timeout_s: float) -> type[asyncio.Protocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` with these limits."""

    class Guarded(GuardedHttpToolsProtocol):
        limit_head_bytes = max_head_bytes
        limit_head_s = head_timeout_s

    return Guarded


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` plus the head bounds and the connection-ending extension."""

    limit_head_bytes = 16384
    limit_head_s = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting_head = True
        self._head_bytes = 0
        self._parsed_head = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._lost = False
        self._gone: asyncio.Future[None] | None = None
        self._counted: _CountingTransport | None = None
        self._sock: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Count what is written, and start the head timer: a client that connects and sends
        nothing is timed out too."""
        assert isinstance(transport, asyncio.Transport)
        self._counted = _CountingTransport(transport)
        self._sock = transport.get_extra_info("socket")
        super().connection_made(self._counted)  # type: ignore[arg-type]
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the head timer along with the connection."""
        self._lost = True
        self._cancel_head_timer()
        super().connection_lost(exc)
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    def data_received(self, data: bytes) -> None:
        """Count head bytes, feed the parser, and refuse a head that outgrew the bound."""
        if self._refused:
            return
        if self._awaiting_head:
            self._head_bytes += len(data)
            self._arm_head_timer()
        super().data_received(data)
        # Counted after feeding, so a head followed by its body in one read is not refused;
        # the overshoot is at most one read (asyncio reads up to 256 KiB at a time).
        if self._awaiting_head and self._head_bytes > self.limit_head_bytes:
            self._refuse_head()

    def on_message_begin(self) -> None:
        """Offer the connection-ending extension in every request's scope."""
        super().on_message_begin()
        extensions = self.scope.setdefault("extensions", {})
        extensions[CONNECTION_EXTENSION] = {
            "end": self._end_connection,
            "progress": self._progress,
        }

    def on_url(self, url: bytes) -> None:
        """Count the target toward the parsed head's size."""
        self._parsed_head += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        """Count each header toward the parsed head's size."""
        self._parsed_head += len(name) + len(value) + 4
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        """The head is in: stop timing it, and refuse it if it came in one read too large."""
        self._awaiting_head = False
        self._head_bytes = 0
        self._cancel_head_timer()
        parsed, self._parsed_head = self._parsed_head, 0
        if self._refused:
            return
        if parsed > self.limit_head_bytes:
            self._refuse_head()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        """Drop the body of a refused request (the parser may still be mid-read)."""
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        """The next bytes on this connection start a new head."""
        if self._refused:
            return
        super().on_message_complete()
        self._awaiting_head = True

    def _refuse_head(self) -> None:
        self._refuse(
            431,
            "Request Header Fields Too Large",
            f"the request head passed {self.limit_head_bytes} bytes",
            f"a request line and headers of at most {self.limit_head_bytes} bytes "
            "(--max-header-bytes)",
        )

    def _arm_head_timer(self) -> None:
        if self._head_timer is None and not self._lost:
            self._head_timer = self.loop.call_later(self.limit_head_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._awaiting_head or self._lost:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head waits behind a response still streaming; time it afresh.
            self._arm_head_timer()
            return
        self._refuse(
            408,
            "Request Timeout",
            f"the request head was not complete within {self.limit_head_s:g} s",
            f"a complete request line and headers within {self.limit_head_s:g} s "
            "(--header-timeout)",
        )

    def _refuse(self, status: int, reason: str, message: str, accepted: str) -> None:
        """Answer ``status`` with the project's JSON error body and close the connection."""
        self._refused = True
        self._cancel_head_timer()
        if self.transport.is_closing():
            return
        body = json.dumps({"error": message, "field": "headers", "accepted": accepted}).encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode()
        self.transport.write(head + body)
        # The client may still be sending (a 64 MiB head); reading no further is the point.
        self.transport.pause_reading()
        self._end_connection(1.0)

    def _progress(self) -> tuple[int, int]:
        """(bytes the client has taken, bytes the server still holds for it)."""
        counted = self._counted
        if counted is None or self._lost:
            return (counted.written if counted else 0), 0
        held = counted.inner.get_write_buffer_size() + kernel_unsent(self._sock)
        return counted.written - held, held

    def _end_connection(self, within_s: float) -> asyncio.Future[None]:
        """Close once the client has taken everything written, but abort if that takes over
        ``within_s``; the future is done once the connection is gone.

        Waiting for the kernel's send queue too, not only the transport's buffer: a socket
        closed with unsent data lingers in FIN-WAIT-1, and its peer keeps reading it at its
        own pace, for minutes if it is a slow reader."""
        if self._gone is None:
            self._gone = self.loop.create_future()
            if self._lost:
                self._gone.set_result(None)
            else:
                self._close_when_taken(self.loop.time() + within_s)
        return self._gone

    def _close_when_taken(self, abort_at: float) -> None:
        if self._lost:
            return
        if self._progress()[1] == 0:
            self.transport.close()
        elif self.loop.time() >= abort_at:
            self._abort_if_open()
        else:
            self.loop.call_later(_CLOSE_POLL_S, self._close_when_taken, abort_at)

    def _abort_if_open(self) -> None:
        if self._lost:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # Linger 0: the kernel drops its unsent data and resets, instead of keeping the
            # socket alive until a reader that stopped reading takes it all.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()
