"""A lean httpx transport for loads of many concurrent plain-HTTP streams (and single streams).

httpx's default transport (httpcore on anyio) spends about 130 µs of CPU per received chunk on a
2-core machine: at 200 streams of 20 tokens/s, half a core, and client stamps milliseconds late.
This one keeps httpx's client API but reads each connection (one per stream) with h11 (httpx's
own HTTP/1.1 parser) on the loop's reader callbacks, one timer per wait; ``https`` URLs go to
httpx's own transport. While 64 KB of a body wait unread the socket is not read, so a slow
reader's backpressure reaches the server through the kernel's receive buffer.

Stamps are the wire's (issue 28). The request is stamped when its last byte left (the kernel's
transmit stamp off the error queue, else the write's return); each read is ``recvmsg`` with
``SO_TIMESTAMPNS``, the kernel's receive time of its last segment, converted to
``perf_counter_ns`` by the two clocks' offset read right then (well under a microsecond). A busy
loop delays a chunk's processing, not its stamp; a loop held while several segments came merges
them into one read at the last one's stamp, and the stream's own timer, run late, notes that
span (``reader_held``). Without kernel stamps (another OS) a read is stamped when the loop reads
it. The response names the stamps (``streamguard_stamps``), the connection
(``streamguard_local``), when the request was handed over (``streamguard_queued_ns``) and the
head's stamp (``streamguard_head_ns``: a first chunk in its segment is never before it).

The load resolves each target's address before its first stream is stamped
(:meth:`LoadTransport.prepare`: a first lookup imports the ``idna`` codec, 2 to 20 ms); the TCP
connect stays inside every stream's measured time, as AIPerf's
``--connection-reuse-strategy never`` measures it.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import contextlib
import socket
import ssl
import struct
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx

from pytest_streamguard.common.cpu import thread_waits_ns


class StampedBytes(bytes):
    """Response bytes with ``stamp_ns``: the kernel's receive stamp as a ``perf_counter_ns``
    value (or, without one, when the event loop read them), before any other stream's
    processing could delay the stamp."""

    stamp_ns: int


# Linux's SO_TIMESTAMPNS (the old, 64-bit-time_t one: SCM_TIMESTAMPNS has the same value); the
# socket module has no name for it.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
# SO_TIMESTAMPING for the request's transmit stamp: software TX stamps, reported as software
# stamps, on the error queue without the payload, keyed by byte (SOF_TIMESTAMPING_TX_SOFTWARE |
# SOFTWARE | OPT_ID | OPT_TSONLY).
_SO_TIMESTAMPING = 37
_TX_FLAGS = (1 << 1) | (1 << 4) | (1 << 7) | (1 << 11)
_ERRQUEUE_SPACE = 512
_READ_SIZE = 65536
KERNEL_STAMPS = sys.platform.startswith("linux")


#: A clock-offset read whose two ``perf_counter_ns`` reads are this close was not preempted.
_OFFSET_READ_NS = 2_000


def kernel_to_perf_ns(realtime_ns: int) -> int:
    """A ``CLOCK_REALTIME`` stamp of the kernel as a ``perf_counter_ns`` value: the offset of the
    two clocks is read now, between two ``perf_counter_ns`` reads. A read that the scheduler
    interrupted (its two reads far apart) would be off by half the interruption, so the
    tightest of up to three reads is taken."""
    best_span, best_offset = -1, 0
    for _ in range(3):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        if best_span < 0 or after - before < best_span:
            best_span, best_offset = after - before, (before + after) // 2 - wall
        if best_span <= _OFFSET_READ_NS:
            break
    return realtime_ns + best_offset


def kernel_stamps() -> bool:
    """Whether this platform's kernel stamps received segments for this client (Linux's
    ``SO_TIMESTAMPNS`` on a TCP socket); without, arrivals are stamped when the loop reads."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            return bool(sock.getsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS))
    except OSError:
        return False


def _stamping(sock: socket.socket, option: int, value: int) -> None:
    """Ask the kernel for stamps; a kernel that refuses leaves the loop's stamps (the trace's
    ``stamps`` then says ``loop``), never a failed stream."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, option, value)


#: While a stream waits this long without a read, its socket is read and watched afresh: uvloop
#: (libuv's poll) was seen to stop calling a socket's reader once a TCP reset arrived after the
#: last data, with no error reported anywhere, so the stream waited out its read timeout (21 of
#: 40 reset streams in a test, 39 of 100 under reset(after_chunks=5)). asyncio's own loops call
#: the reader, whose recvmsg raises the reset. A wait of a token stream is shorter than this, so
#: the look costs nothing there; a reset seen by it is seen up to this late.
_PROBE_S = 0.05
#: A read after a silence this long notes how long the embedded Toxiproxy's loop waited for a
#: CPU over it (``proxy_waits``); between, its wait is read at most this often, for the process.
_SILENCE_NS = 50_000_000
_PROXY_EVERY_NS = 10_000_000
#: A stream's own timer (``_PROBE_S``) that ran this late, with a read, says the loop was held.
_HELD_NS = 10_000_000
_proxy_read: dict[int, tuple[int, dict[int, int]]] = {}


def _proxy_waited(pid: int, now: int, fresh: bool) -> dict[int, int] | None:
    """Process ``pid``'s threads' waits for a CPU so far: read afresh if asked, or if the last
    read is ``_PROXY_EVERY_NS`` old, else the last read's (an older, smaller figure)."""
    read = _proxy_read.get(pid)
    if fresh or read is None or now - read[0] >= _PROXY_EVERY_NS:
        if (waited := thread_waits_ns(pid)) is None:
            return None
        _proxy_read[pid] = read = (now, waited)
    return read[1]


class _Connection:
    """One HTTP/1.1 exchange on a non-blocking socket: h11 events queued as bytes arrive, each
    read stamped by the kernel where it can (see the module docstring)."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.loop = loop
        self.h11 = h11.Connection(h11.CLIENT)
        self.events: collections.deque[Any] = collections.deque()
        self.error: httpx.TransportError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.stamp_ns = 0
        # The stamps of the reads that completed the response head and ended the body.
        self.head_ns: int | None = None
        self.end_ns: int | None = None
        self.kernel = False
        self.read_delay_ns: list[int] = []
        # When the last read ran, and the spans the loop was held (``reader_held``).
        self.read_ns = 0
        self.held: list[tuple[int, int]] = []
        # With watch_proxy: the proxy's pid, its wait over each silence, and at the last read.
        self.proxy_pid: int | None = None
        self.proxy_waits: list[tuple[int, int]] = []
        self._proxy_at: tuple[int, dict[int, int]] = (0, {})
        self.closed = False
        # Body bytes parsed but not yet taken by the reader; past _READ_SIZE the socket is not
        # read until the reader catches up, so a slow reader's backpressure reaches the server
        # through the kernel's receive buffer, as with httpx's own transport.
        self.queued = 0
        self.paused = False
        self.ancillary = socket.CMSG_SPACE(_TIMESPEC.size) if KERNEL_STAMPS else 0
        loop.add_reader(sock.fileno(), self._readable)

    def watch_proxy(self, pid: int | None) -> None:
        """Note process ``pid``'s (the embedded Toxiproxy's) wait for a CPU over each silence
        of ``_SILENCE_NS`` or more from now on (None: nothing). The start takes the process's
        last reading, as a read does: a load's burst of connections reads ``/proc`` once."""
        now = time.perf_counter_ns()
        waited = None if pid is None else _proxy_waited(pid, now, fresh=False)
        if waited is not None:
            self.proxy_pid, self._proxy_at = pid, (now, waited)

    def _note_proxy(self, pid: int, stamp: int, now: int) -> None:
        last, before = self._proxy_at
        silent = stamp - last >= _SILENCE_NS
        waited = _proxy_waited(pid, now, fresh=silent)
        if waited is not None:
            if silent:
                spent = sum(ns - before.get(t, 0) for t, ns in waited.items())
                self.proxy_waits.append((stamp, spent))
            self._proxy_at = (stamp, waited)

    def rearm(self) -> None:
        """Read once and watch the socket afresh: its poll may have missed an error (above)."""
        if self.closed or self.paused:
            return
        fd = self.sock.fileno()
        self.loop.remove_reader(fd)
        self._readable()
        if not self.closed and not self.paused:
            self.loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(_READ_SIZE, self.ancillary)
        except (BlockingIOError, InterruptedError):
            # Maybe a late transmit stamp on the error queue made the socket ready.
            self._sent_stamp()
            return
        except OSError as exc:
            self._lost(exc)
            return
        now = time.perf_counter_ns()
        stamp = now
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                seconds, nanoseconds = _TIMESPEC.unpack(value[: _TIMESPEC.size])
                stamp = min(kernel_to_perf_ns(seconds * 1_000_000_000 + nanoseconds), now)
                self.kernel = True
        if not data:
            # The server closed its side: that may end a close-delimited body.
            self.stamp_ns = stamp
            self._parse(b"")
            self._lost(None)
            return
        self.read_delay_ns.append(now - stamp)
        self.read_ns = now
        if self.proxy_pid is not None:
            self._note_proxy(self.proxy_pid, stamp, now)
        self.stamp_ns = stamp
        self._parse(data)
        if self.queued >= _READ_SIZE and not self.closed and not self.paused:
            self.paused = True
            self.loop.remove_reader(self.sock.fileno())

    def _lost(self, exc: Exception | None) -> None:
        """Reset or closed: a reader still waiting gets an error instead of hanging."""
        self._stop_reading()
        if exc is not None and self.error is None:
            self.error = httpx.ReadError(f"{type(exc).__name__}: {exc}")
        elif self.error is None:
            self._parse(b"")
            if self.error is None:
                self.error = httpx.RemoteProtocolError(
                    "connection closed before the response ended"
                )
        self._wake()

    def _stop_reading(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.remove_reader(self.sock.fileno())

    def _parse(self, data: bytes) -> None:
        try:
            self.h11.receive_data(data)
            while True:
                event = self.h11.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    break
                if isinstance(event, h11.Data):
                    data = StampedBytes(event.data)
                    data.stamp_ns = self.stamp_ns
                    event = h11.Data(data=data)
                    self.queued += len(data)
                elif isinstance(event, h11.Response):
                    self.head_ns = self.stamp_ns
                self.events.append(event)
                if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    self.end_ns = self.stamp_ns
                    break
        except h11.RemoteProtocolError as exc:
            # Most often a body cut short: "peer closed connection without sending complete
            # message body".
            self.error = httpx.RemoteProtocolError(str(exc))
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def next_event(self, read_timeout: float | None) -> Any:
        """The next h11 event; httpx.ReadTimeout after ``read_timeout`` s without one."""
        loop = asyncio.get_running_loop()
        deadline = None if read_timeout is None else loop.time() + read_timeout
        while not self.events:
            if self.error is not None:
                raise self.error
            waiter = self.waiter = loop.create_future()
            wait = max(_PROBE_S if deadline is None else min(_PROBE_S, deadline - loop.time()), 0)
            due = time.perf_counter_ns() + int(wait * 1e9)
            timer = loop.call_later(wait, waiter.cancel)
            try:
                await waiter
                # A read ran first, after the timer fell due: the loop was held (reader_held).
                if self.read_ns - due > _HELD_NS:
                    self.held.append((due, self.read_ns))
            except asyncio.CancelledError:
                if not waiter.cancelled() or _task_cancelling():
                    raise
                if deadline is not None and loop.time() >= deadline:
                    raise httpx.ReadTimeout(f"no data for {read_timeout} s") from None
                self.rearm()
            finally:
                timer.cancel()
        event = self.events.popleft()
        if isinstance(event, h11.Data):
            self.queued -= len(event.data)
            if self.paused and self.queued < _READ_SIZE and not self.closed:
                self.paused = False
                self.loop.add_reader(self.sock.fileno(), self._readable)
        return event

    async def send(self, *events: Any) -> int:
        """Serialise and write request events; ``perf_counter_ns`` once the last byte is written
        (handed to the kernel)."""
        payload = b"".join(self.h11.send(event) or b"" for event in events)
        try:
            try:
                sent = self.sock.send(payload)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if sent < len(payload):
                await self.loop.sock_sendall(self.sock, payload[sent:])
        except OSError as exc:
            raise httpx.WriteError(f"{type(exc).__name__}: {exc}") from None
        now = time.perf_counter_ns()
        stamp = self._sent_stamp()
        return now if stamp is None else min(stamp, now)

    def _sent_stamp(self) -> int | None:
        """The kernel's transmit stamp of the request's last byte (as ``perf_counter_ns``),
        taken off the error queue; None where there is none (yet)."""
        if not KERNEL_STAMPS:
            return None
        stamp = None
        while True:
            try:
                _, ancillary, _, _ = self.sock.recvmsg(1, _ERRQUEUE_SPACE, socket.MSG_ERRQUEUE)
            except OSError:
                return stamp
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPING:
                    seconds, nanoseconds = _TIMESPEC.unpack(value[: _TIMESPEC.size])
                    stamp = kernel_to_perf_ns(seconds * 1_000_000_000 + nanoseconds)

    def close(self) -> None:
        """Close the socket."""
        self._stop_reading()
        self.sock.close()


def _task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class _Body(httpx.AsyncByteStream):
    """The response body, chunk by chunk as the network delivered it."""

    def __init__(self, connection: _Connection, read_timeout: float | None) -> None:
        self.connection = connection
        self.read_timeout = read_timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            event = await self.connection.next_event(self.read_timeout)
            if isinstance(event, h11.Data):
                yield event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return

    async def aclose(self) -> None:
        self.connection.close()


class LoadTransport(httpx.AsyncBaseTransport):
    """httpx transport: one lean connection per plain-HTTP request (see the module docstring)."""

    def __init__(
        self,
        max_streams: int,
        socket_options: list[tuple[int, int, int]],
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.socket_options = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1), *socket_options]
        self.max_streams = max_streams
        self.verify = verify
        self.addresses: dict[tuple[str, int], tuple[int, tuple[Any, ...]]] = {}
        self._fallback: httpx.AsyncHTTPTransport | None = None

    def fallback(self) -> httpx.AsyncHTTPTransport:
        """httpx's default transport, pooled for the load, for ``https``. Made on first use:
        its SSL context costs tens of ms that a plain-HTTP load never needs."""
        if self._fallback is None:
            limits = httpx.Limits(
                max_connections=self.max_streams, max_keepalive_connections=self.max_streams
            )
            self._fallback = httpx.AsyncHTTPTransport(
                verify=self.verify, socket_options=self.socket_options, limits=limits
            )
        return self._fallback

    async def prepare(self, url: str) -> None:
        """What ``url``'s first stream would otherwise pay inside its measured time: the
        address lookup (plain HTTP) or the SSL context (``https``)."""
        parsed = httpx.URL(url)
        # uvloop's sock_connect encodes the host with the idna codec even for an IP address;
        # the codec's first lookup in a process imports it and stringprep.
        codecs.lookup("idna")
        if parsed.scheme == "http":
            await self._address(parsed.host, parsed.port or 80)
        else:
            self.fallback()

    async def _address(self, host: str, port: int) -> tuple[int, tuple[Any, ...]]:
        """``(family, socket address)`` of ``host``: IPv4 first (``localhost`` is 127.0.0.1
        whatever order the resolver gives), else what the name has (an IPv6 literal)."""
        key = (host, port)
        address = self.addresses.get(key)
        if address is None:
            loop = asyncio.get_running_loop()
            try:
                infos = await loop.getaddrinfo(
                    host, port, family=socket.AF_INET, type=socket.SOCK_STREAM
                )
            except socket.gaierror:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            address = self.addresses[key] = (infos[0][0], infos[0][4])
        return address

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Connect, send the request, and return once the response headers are in."""
        if request.url.scheme != "http":
            return await self.fallback().handle_async_request(request)
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        queued_ns = time.perf_counter_ns()
        connection = await self._connect(request, timeouts.get("connect"))
        connection.watch_proxy(request.extensions.get("streamguard_proxy_pid"))
        try:
            address, port = connection.sock.getsockname()[:2]
            local = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
            host = request.url.netloc
            headers = [
                (b"host", host),
                *((k, v) for k, v in request.headers.raw if k.lower() != b"host"),
            ]
            body = await request.aread()
            sent_ns = await connection.send(
                h11.Request(method=request.method, target=request.url.raw_path, headers=headers),
                h11.Data(data=body),
                h11.EndOfMessage(),
            )
            while True:
                event = await connection.next_event(timeouts.get("read"))
                if isinstance(event, h11.Response):
                    break
        except BaseException:
            connection.close()
            raise
        return httpx.Response(
            status_code=event.status_code,
            headers=list(event.headers),
            stream=_Body(connection, timeouts.get("read")),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": event.reason,
                "streamguard_queued_ns": queued_ns,
                "streamguard_sent_ns": sent_ns,
                "streamguard_head_ns": connection.head_ns,
                "streamguard_local": local,
                "streamguard_connection": connection,
            },
        )

    async def _connect(self, request: httpx.Request, connect_timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        port = request.url.port or 80
        try:
            family, address = await self._address(request.url.host, port)
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from None
        try:
            for level, name, value in self.socket_options:
                sock.setsockopt(level, name, value)
            if KERNEL_STAMPS:
                _stamping(sock, _SO_TIMESTAMPNS, 1)
            sock.setblocking(False)
            await asyncio.wait_for(loop.sock_connect(sock, address), connect_timeout)
            if KERNEL_STAMPS:
                # OPT_ID needs an established TCP socket (EINVAL before the connect).
                _stamping(sock, _SO_TIMESTAMPING, _TX_FLAGS)
            connection = _Connection(sock, loop)
        except TimeoutError:
            sock.close()
            raise httpx.ConnectTimeout(f"connect to {request.url.host}:{port} timed out") from None
        except OSError as exc:
            sock.close()
            raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from None
        return connection

    async def aclose(self) -> None:
        """Close the fallback transport, if one was made."""
        if self._fallback is not None:
            await self._fallback.aclose()
