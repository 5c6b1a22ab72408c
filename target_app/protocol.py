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
  connection and aborts it if the flush has not finished ``within_s`` seconds later (a slow
  reader's socket would otherwise stay open until it reads everything); it returns a future
  that is done once the connection is gone, so the app can return after that and uvicorn
  sees a disconnect rather than an unfinished response.

The body read timeout lives in the app (``validation.read_body``), where a 408 can be
an ordinary JSON answer.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

CONNECTION_EXTENSION = "streamguard.connection"
"""Scope extension key: ``scope["extensions"][CONNECTION_EXTENSION]["end"](within_s)``."""


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

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the head timer: a client that connects and sends nothing is timed out too."""
        super().connection_made(transport)  # type: ignore[arg-type]
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
        extensions[CONNECTION_EXTENSION] = {"end": self._end_connection}

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

    def _end_connection(self, within_s: float) -> asyncio.Future[None]:
        """Close after flushing what is buffered, but abort if that takes over ``within_s``;
        the future is done once the connection is gone."""
        if self._gone is None:
            self._gone = self.loop.create_future()
            if self._lost:
                self._gone.set_result(None)
            else:
                self.transport.close()
                self.loop.call_later(within_s, self._abort_if_open)
        return self._gone

    def _abort_if_open(self) -> None:
        if self._lost:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # Linger 0: the kernel drops its unsent data and resets, instead of keeping the
            # socket alive until a reader that stopped reading takes it all.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()
