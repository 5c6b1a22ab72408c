"""A tap on a stack's inner hop: when each byte of the answers reached the service in front.

The plugin puts a :class:`Tap` between a service and the proxy in front of the service it
reaches (``{model}`` in the gateway's command is the tap's address): a plain TCP forwarder on
127.0.0.1, in a thread of the pytest process, that passes every byte on as it comes and stamps
each read of the answer side with ``time.perf_counter_ns()`` (the clock of the client's own
stamps). It sits after the hop's proxy, so its stamps are what the service in front received,
faults included. A FIN is passed on as a FIN (half-close) and a reset as a reset.

Each request on a connection is an :class:`Exchange`: the request id its head carried
(``x-request-id``, else the trace id of a W3C ``traceparent``, which the plugin's client sends
and gateways commonly forward), the stamps of its answer's body (the response head is not
counted: an answer sent in one piece is measured from its first body byte) and which side ended
it first (``upstream``: the service behind; ``front``: the service in front). A request starts
a new exchange once the previous one's answer has begun (keep-alive; no pipelining).
:meth:`Tap.exchange` finds a client stream's by its id, else by time where the stream was the
only one open.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

__all__ = ["Exchange", "Tap"]

_READ_SIZE = 64 * 1024
#: A head longer than this is not parsed further (its id, its end): the bytes still pass.
_HEAD_MAX = 16 * 1024
_END = b"\r\n\r\n"


@dataclass
class Exchange:
    """One request on an inner hop and its answer: ``request_ns`` (its first byte),
    ``request_id`` (None: its head carried none), ``method``, ``reads`` (``(stamp_ns, bytes)``
    of the answer's body) and ``ended`` (``upstream`` or ``front``: which side closed the connection
    first; None: neither, or not while this exchange was the connection's last)."""

    request_ns: int
    request_id: str | None = None
    method: str | None = None
    reads: list[tuple[int, int]] = field(default_factory=list)
    ended: str | None = None
    _head: bytearray = field(default_factory=bytearray, repr=False)
    _answer: bytearray = field(default_factory=bytearray, repr=False)
    _in_body: bool = field(default=False, repr=False)

    @property
    def answering(self) -> bool:
        """Whether its answer has begun (a request after that is the connection's next)."""
        return self._in_body or bool(self._answer)

    def requested(self, data: bytes) -> None:
        """Bytes of the request: its head gives the request id."""
        if len(self._head) >= _HEAD_MAX or _END in self._head:
            return
        self._head += data
        if _END in self._head:
            head = bytes(self._head).split(_END, 1)[0]
            self.method = head.split(b" ", 1)[0].decode("latin-1")
            self.request_id = request_id(head)

    def answered(self, stamp_ns: int, data: bytes) -> None:
        """Bytes of the answer read at ``stamp_ns``: the body's are stamped."""
        body = len(data)
        if not self._in_body:
            self._answer += data
            _, end, rest = bytes(self._answer).partition(_END)
            if not end and len(self._answer) < _HEAD_MAX:
                return
            self._in_body = True
            self._answer.clear()
            body = len(rest) if end else body
        if body:
            self.reads.append((stamp_ns, body))


def request_id(head: bytes) -> str | None:
    """The ``x-request-id`` of a request head, else the trace id of its ``traceparent``."""
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().decode("latin-1")
    if headers.get(b"x-request-id"):
        return headers[b"x-request-id"]
    parts = headers.get(b"traceparent", "").split("-")
    return parts[1] if len(parts) == 4 else None


class Tap:
    """A stamping TCP forwarder to ``upstream`` (``host:port``); :attr:`address` is its own."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host.strip("[]"), int(port))
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        # Every open connection's writers (the loop's thread only), closed by close().
        self._open: set[asyncio.StreamWriter] = set()
        self._sock = socket.create_server(("127.0.0.1", 0))
        # Inherited by what it accepts, left to Nagle by asyncio (TCP_NODELAY only on IPPROTO_TCP
        # sockets): a body waited for its head's ACK, up to 40 ms (a ready path: 45 ms, not 4).
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="streamguard-tap", daemon=True)
        self._thread.start()
        self._ready.wait(10.0)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> asyncio.Server:
            return await asyncio.start_server(self._connection, sock=self._sock)

        self._server = self._loop.run_until_complete(serve())
        self._ready.set()
        self._loop.run_forever()

    async def _connection(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        writers = {client_w}
        self._open.add(client_w)
        try:
            try:
                upstream_r, upstream_w = await asyncio.open_connection(*self.upstream)
            except OSError:
                _reset(client_w)
                return
            writers.add(upstream_w)
            self._open.add(upstream_w)
            exchanges: list[Exchange] = []
            await asyncio.gather(
                self._pump(client_r, upstream_w, exchanges, answer=False),
                self._pump(upstream_r, client_w, exchanges, answer=True),
            )
        except asyncio.CancelledError:
            # close() cancels the connections it ends; asyncio's server would log a cancelled
            # handler as an error with a traceback in the test's output (nothing went wrong).
            return
        finally:
            for writer in writers:
                self._open.discard(writer)
                writer.close()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        exchanges: list[Exchange],
        *,
        answer: bool,
    ) -> None:
        """Pass ``reader``'s bytes on to ``writer`` until its end, noting them on the
        connection's ``exchanges``: a FIN is passed on as a FIN, a reset (or a write that
        failed) as a reset."""
        try:
            while data := await reader.read(_READ_SIZE):
                self._note(exchanges, data, answer=answer)
                writer.write(data)
                await writer.drain()
        except OSError:
            _reset(writer)
            return
        finally:
            if exchanges and exchanges[-1].ended is None:
                exchanges[-1].ended = "upstream" if answer else "front"
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()

    def _note(self, exchanges: list[Exchange], data: bytes, *, answer: bool) -> None:
        now = time.perf_counter_ns()
        with self._lock:
            if answer:
                if exchanges:
                    exchanges[-1].answered(now, data)
                return
            if not exchanges or exchanges[-1].answering:
                exchanges.append(Exchange(now))
                self._exchanges.append(exchanges[-1])
            exchanges[-1].requested(data)

    def exchange(
        self, request_id: str | None, start_ns: int, end_ns: int, *, alone: bool, method: str = ""
    ) -> Exchange | None:
        """A client stream's exchange on this hop: the last one its ``request_id`` came
        through on; else, for a stream that was the only one open (``alone``), the one request
        of its ``method`` (any, if empty) sent from ``start_ns`` to ``end_ns`` when there was
        exactly one (a probe's ``GET`` of a ready path beside a ``POST`` is not it); else None."""
        with self._lock:
            if request_id is not None:
                by_id = [e for e in self._exchanges if e.request_id == request_id]
                if by_id:
                    return by_id[-1]
            during = [
                e
                for e in self._exchanges
                if start_ns <= e.request_ns <= end_ns and method in ("", e.method)
            ]
            return during[0] if alone and len(during) == 1 else None

    def took_by_id(self) -> dict[str, int]:
        """By request id, its exchange's time here (ns: first request byte to last body read)."""
        with self._lock:
            return {
                e.request_id: e.reads[-1][0] - e.request_ns
                for e in self._exchanges
                if e.request_id is not None and e.reads
            }

    def forget_before(self, stamp_ns: int) -> None:
        """Drop the exchanges requested before ``stamp_ns`` (a test's end: no later stream
        needs them)."""
        with self._lock:
            self._exchanges = [e for e in self._exchanges if e.request_ns >= stamp_ns]

    def close(self) -> None:
        """Stop forwarding: close the listening socket and every connection, end the thread."""

        async def stop() -> None:
            self._server.close()
            for writer in list(self._open):
                writer.transport.abort()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
            if not self._thread.is_alive():
                self._loop.close()
        self._sock.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s connection with an RST (SO_LINGER 0), as the other side was."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
