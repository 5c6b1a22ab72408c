"""A proxy: its listener, its toxics and the connections through it.

Per accepted client the proxy dials the upstream (an unreachable upstream: the client is
accepted, then closed) and starts two links: ``upstream`` (client to server) and
``downstream`` (server to client). Each socket reads at most 32 KiB at a time, like Go's
``io.Copy``, so a chunk is what Toxiproxy calls a chunk.

A new connection never waits on another: the dial starts in the accept callback, the client's
first bytes are read while it is under way, and the links start (and those bytes go through
the toxics, stamped then) in the upstream socket's ``connection_made``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections.abc import Callable
from typing import Any, Final, cast

from .buffers import dial_throttled, throttled_rcvbuf
from .channels import Sink
from .errors import TOXIC_EXISTS, TOXIC_NOT_FOUND, ApiError, invalid_input
from .events import RequestAims
from .link import Link
from .logs import log
from .metrics import Metrics
from .toxics import Direction, ProxyToxic, updated_toxic

READ_SIZE: Final = 32 * 1024
DIAL_TIMEOUT_S: Final = 30.0
_WILDCARDS: Final = ("", "0.0.0.0", "::")
DEFAULT_LISTEN: Final = "127.0.0.1:0"
_READ_BUFFER: Final = memoryview(bytearray(READ_SIZE))


def split_host_port(address: str) -> tuple[str, int]:
    """Split ``host:port`` or ``[v6]:port`` like Go's ``net.SplitHostPort``, or raise ValueError."""
    if address.startswith("["):
        host, sep, rest = address[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"address {address}: missing port in address")
        port_text = rest[1:]
    else:
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise ValueError(f"address {address}: missing port in address")
        if ":" in host:
            raise ValueError(f"address {address}: too many colons in address")
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"address {address}: invalid port")
    return host, int(port_text)


def check_upstream(upstream: str) -> None:
    """Reject an upstream that can never be dialled (the real server accepts it silently)."""
    try:
        host, port = split_host_port(upstream)
    except ValueError as exc:
        raise invalid_input(f"invalid upstream {upstream!r}: {exc}; expected host:port") from None
    if not host or port == 0:
        raise invalid_input(
            f"invalid upstream {upstream!r}: expected host:port with a host and a port 1-65535"
        )


def format_address(sockaddr: Any, family: int) -> str:
    """Go's ``Addr.String()``: ``ip:port``, IPv6 in brackets."""
    host, port = sockaddr[0], sockaddr[1]
    return f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"


async def resolve_listen(listen: str) -> str:
    """What Go's ``net.ResolveTCPAddr`` makes of a listen address, as ``Addr.String()``: an
    IP literal normalised, a name looked up (IPv4 first), an empty host kept empty. Raise
    the real server's 500 when it does not resolve."""
    try:
        host, port = split_host_port(listen)
    except ValueError as exc:
        raise ApiError(str(exc), 500) from None
    if not host:
        return f":{port}"
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        # UnicodeError: a name IDNA cannot encode (an empty or 64+ character label, U+FFFD),
        # which Go's resolver simply fails to find.
        raise ApiError(f"lookup {host}: no such host", 500) from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return format_address(infos[0][4], infos[0][0])


async def bind_listener(listen: str) -> socket.socket:
    """Bind and listen on ``listen``; errors carry the real server's 500 texts."""
    try:
        host, port = split_host_port(listen)
    except ValueError as exc:
        raise ApiError(f"listen tcp: {exc}", 500) from None
    sockaddr: tuple[str, int] | tuple[str, int, int, int]
    if host in _WILDCARDS and socket.has_ipv6:
        # Go listens dual-stack on a wildcard address and reports it as [::]:port.
        family, sockaddr = socket.AF_INET6, ("::", port, 0, 0)
    else:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host or "0.0.0.0", port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise ApiError(f"listen tcp: lookup {host}: no such host", 500) from None
        infos.sort(key=lambda info: info[0] != socket.AF_INET)
        family, address = infos[0][0], infos[0][4]
        sockaddr = (str(address[0]), int(address[1]))
    # IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets made with it (uvloop on all).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(sockaddr)
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        shown = format_address(sockaddr, family)
        raise ApiError(f"listen tcp {shown}: bind: {reason}", 500) from None
    return sock


class Side(asyncio.BufferedProtocol):
    """One socket of a proxied connection: the source of one link and the sink of the other."""

    # Slots: a burst of connections makes two of these per connection, one after the other.
    __slots__ = (
        "_on_made",
        "early",
        "early_bytes",
        "early_eof",
        "lost",
        "reader",
        "reset",
        "sink",
        "transport",
    )

    def __init__(self, on_made: Callable[[Side], None] | None = None) -> None:
        self._on_made = on_made
        self.transport: asyncio.Transport | None = None
        self.reader: Link | None = None
        self.sink: Sink | None = None
        self.lost = False
        self.early: list[bytes] = []
        self.early_bytes = 0
        self.early_eof = False
        self.reset = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep reading: what arrives before the links exist waits in ``early`` (one read's
        worth at most, then reading pauses), so the client's first bytes are in hand when the
        upstream connects."""
        # uvloop's transports implement asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        # Called once, then dropped: the upstream side's callback holds its connection, and a
        # reference cycle would leave the connection to the garbage collector (see _done).
        on_made, self._on_made = self._on_made, None
        if on_made is not None:
            on_made(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        """Reads land in one 32 KiB buffer shared by every socket: the loop reads into it
        and calls :meth:`buffer_updated` at once, which copies the bytes out."""
        return _READ_BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        """A read completed: hand a copy to the link that reads this socket."""
        if self.reader is not None:
            self.reader.feed(bytes(_READ_BUFFER[:nbytes]))
        else:
            # Read before the links exist (the upstream is still being dialled): keep it for
            # the link, and stop reading past one read's worth.
            self.early.append(bytes(_READ_BUFFER[:nbytes]))
            self.early_bytes += nbytes
            if self.early_bytes >= READ_SIZE and self.transport is not None:
                self.transport.pause_reading()

    def eof_received(self) -> bool:
        """The peer half-closed: end the link reading this socket, keep writing to it."""
        if self.reader is not None:
            self.reader.feed_eof()
        else:
            self.early_eof = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        """The socket is gone: no more input, and nothing waits on its write buffer. A read
        that failed with ECONNRESET is recorded, so the reset can be passed on."""
        self.lost = True
        self.reset = isinstance(exc, ConnectionResetError)
        if self.reader is not None:
            self.reader.feed_eof(reset=self.reset)
        else:
            self.early_eof = True
        if self.sink is not None:
            self.sink.resume()

    def pause_writing(self) -> None:
        """The write buffer is full: the link writing here must wait."""
        if self.sink is not None:
            self.sink.pause()

    def resume_writing(self) -> None:
        """The write buffer drained."""
        if self.sink is not None:
            self.sink.resume()


class Connection:
    """A client connection and its upstream connection, joined by two links."""

    __slots__ = ("__weakref__", "client", "closed", "links", "proxy", "seed", "upstream")

    def __init__(self, proxy: Proxy, client: Side) -> None:
        self.proxy = proxy
        self.client = client
        # Each link draws from a generator of its own, seeded from the proxy's seed and this
        # connection's place among the proxy's connections: with -seed, a test's draws do not
        # shift with what other connections, or the other direction, drew meanwhile.
        proxy.accepted += 1
        self.seed = f"{proxy.seed}:{proxy.accepted}"
        self.upstream: Side | None = None
        self.links: dict[Direction, Link] = {}
        self.closed = False

    def dial(self) -> None:
        """Start dialling the upstream now, in the accept callback: the links start in the
        upstream socket's ``connection_made``, and the client's first bytes (read meanwhile)
        are written at once. An unreachable upstream closes the client."""
        proxy = self.proxy
        loop = asyncio.get_running_loop()
        try:
            host, port = split_host_port(proxy.upstream)
        except ValueError as exc:
            self._dial_failed(exc)
            return
        # Under a downstream bandwidth toxic, small upstream buffers (buffers.py).
        rcvbuf = throttled_rcvbuf(proxy.toxics)
        dialling = (
            loop.create_connection(lambda: Side(self._wire), host, port)
            if rcvbuf is None
            else dial_throttled(lambda: Side(self._wire), host, port, rcvbuf)
        )
        task = loop.create_task(dialling)
        timer = loop.call_later(DIAL_TIMEOUT_S, task.cancel)
        proxy.dialling.add(task)

        def dialled(task: asyncio.Task[tuple[asyncio.BaseTransport, Side]]) -> None:
            proxy.dialling.discard(task)
            timer.cancel()
            if task.cancelled():
                self._dial_failed(TimeoutError(f"dial timed out after {DIAL_TIMEOUT_S:g} s"))
            elif (exc := task.exception()) is not None:
                self._dial_failed(exc)

        task.add_done_callback(dialled)

    def _dial_failed(self, exc: BaseException) -> None:
        if self.upstream is not None:
            return  # connected, then cancelled by the dial timer: the links own it now
        log(
            "error",
            "Unable to open connection to upstream",
            name=self.proxy.name,
            upstream=self.proxy.upstream,
            err=str(exc),
        )
        if self.client.early and self.client.transport is not None:
            # Go closes a client whose bytes it never read: the kernel answers that with an
            # RST. Those bytes were read here already, so make the close an RST explicitly.
            sock = self.client.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.abort()

    def _wire(self, upstream: Side) -> None:
        """The upstream connected: start both links and hand them what was read early."""
        proxy = self.proxy
        self.upstream = upstream
        if self.closed:
            self.abort()
            return
        client_t, upstream_t = self.client.transport, upstream.transport
        assert client_t is not None
        assert upstream_t is not None
        toxics = proxy.toxics
        if toxics and any(toxic.type.name == "reset_peer" for toxic in toxics):
            # Like Toxiproxy's ToxicLink.Start: linger 0 on both sockets when a reset_peer
            # toxic exists at connect time, so every close of this connection is an RST.
            for transport in (client_t, upstream_t):
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        requests = RequestAims()
        up, down = (
            Link(direction, source, sink, f"{self.seed}:{tag}", self._link_finished, requests)
            for direction, source, sink, tag in (
                (Direction.UPSTREAM, client_t, upstream_t, "up"),
                (Direction.DOWNSTREAM, upstream_t, client_t, "down"),
            )
        )
        self.links = {Direction.UPSTREAM: up, Direction.DOWNSTREAM: down}
        self.client.reader, self.client.sink = up, down.sink
        upstream.reader, upstream.sink = down, up.sink
        if toxics:
            for link in (up, down):
                link.configure(proxy.toxics_for(link.direction))
        side = self.client
        for data in side.early:
            up.feed(data)
        side.early.clear()
        if side.early_eof or side.lost:
            up.feed_eof(reset=side.reset)
        elif not up.paused and not up.eof and side.early_bytes >= READ_SIZE:
            client_t.resume_reading()

    def _link_finished(self, link: Link) -> None:
        # Go closes the destination when a link ends; the other link's source is that same
        # socket, so it ends too once its chain has drained.
        if link.source_reset and link.direction is Direction.DOWNSTREAM:
            # The upstream reset the connection: the client gets an RST too, after the bytes
            # read before it (real Toxiproxy sends a FIN, so a close-delimited body that was
            # reset reads as complete; a documented divergence).
            sock = link.sink.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        link.sink.transport.close()
        for other in self.links.values():
            if other is not link:
                other.feed_eof()
        if all(each.finished for each in self.links.values()):
            self._done()

    def abort(self) -> None:
        """Close both sockets now (proxy disabled or deleted)."""
        for link in self.links.values():
            link.stop()
        for side in (self.client, self.upstream):
            if side is not None and side.transport is not None:
                side.transport.abort()
        self._done()

    def _done(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.proxy.connections.discard(self)
        for link in self.links.values():
            self.proxy.metrics.count(
                link.direction.value,
                (self.proxy.name, self.proxy.listen, self.proxy.upstream),
                link.received,
                link.sink.sent,
            )
            # Without its reference cycles the connection is freed as soon as its sockets
            # are: the collector, which would otherwise free hundreds of connections at once,
            # stops the loop (and every stream through it) for milliseconds.
            link.release()


class Proxy:
    """A named proxy: listen address, upstream, enabled state and its toxics."""

    def __init__(
        self, name: str, listen: str, upstream: str, rng: random.Random, metrics: Metrics
    ) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.rng = rng
        # Drawn once from the server's generator (-seed): the root of this proxy's draws.
        self.seed = rng.getrandbits(64)
        self.accepted = 0
        self.metrics = metrics
        self.toxics: list[ProxyToxic] = []
        self.connections: set[Connection] = set()
        self._server: asyncio.AbstractServer | None = None
        self.dialling: set[asyncio.Task[Any]] = set()

    def to_json(self) -> dict[str, Any]:
        """The proxy object of the API, ``Logger`` and ``toxics`` included."""
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "Logger": {},
            "toxics": self.toxic_array(),
        }

    def toxic_array(self) -> list[dict[str, Any]]:
        """Upstream toxics first, then downstream, each in the order they were added."""
        ordered = self.toxics_for(Direction.UPSTREAM) + self.toxics_for(Direction.DOWNSTREAM)
        return [toxic.to_json() for toxic in ordered]

    def toxics_for(self, direction: Direction) -> list[ProxyToxic]:
        """This direction's toxics, in chain order."""
        return [toxic for toxic in self.toxics if toxic.direction is direction]

    async def start(self) -> None:
        """Bind the listener and accept connections; ``listen`` becomes the bound address."""
        if self.enabled:
            return
        sock = await bind_listener(self.listen)
        loop = asyncio.get_running_loop()
        # The listen backlog of Go's listener (the kernel's somaxconn): create_server would
        # re-listen with 100, and a burst of 1,000 connections would lose handshakes.
        self._server = await loop.create_server(
            lambda: Side(self._accepted), sock=sock, backlog=socket.SOMAXCONN
        )
        self.listen = format_address(sock.getsockname(), sock.family)
        self.enabled = True
        log("info", "Started proxy", name=self.name, proxy=self.listen, upstream=self.upstream)

    def stop(self) -> None:
        """Close the listener and every connection through the proxy."""
        if not self.enabled:
            return
        self.enabled = False
        if self._server is not None:
            self._server.close()
            self._server = None
        for connection in list(self.connections):
            connection.abort()
        log("info", "Terminated proxy", name=self.name, proxy=self.listen, upstream=self.upstream)

    async def differs(self, listen: str, upstream: str) -> bool:
        """Go's ``Proxy.Differs``: whether ``listen`` (resolved) or ``upstream`` is not what
        the proxy has now. A listen address that does not resolve is the real server's 500."""
        return await resolve_listen(listen) != self.listen or upstream != self.upstream

    async def update(self, listen: str, upstream: str, enabled: bool) -> None:
        """Go's ``Proxy.Update``: a new address or upstream restarts the listener (closing
        open connections); the same ones leave it and its connections alone; then the proxy
        follows ``enabled``. An unresolvable address fails before anything changes."""
        if await self.differs(listen, upstream):
            self.stop()
            self.listen = listen
            self.upstream = upstream
        if enabled and not self.enabled:
            await self.start()
        elif not enabled:
            self.stop()

    def _accepted(self, side: Side) -> None:
        connection = Connection(self, side)
        self.connections.add(connection)
        connection.dial()

    def find_toxic(self, name: str) -> ProxyToxic | None:
        """The toxic called ``name`` in either direction."""
        return next((toxic for toxic in self.toxics if toxic.name == name), None)

    def add_toxic(self, toxic: ProxyToxic) -> None:
        """Append a toxic and re-wire every open connection before returning."""
        if self.find_toxic(toxic.name) is not None:
            raise TOXIC_EXISTS
        self.toxics.append(toxic)
        self._rewire(toxic.direction, toxic.name)

    def update_toxic(self, name: str, body: object) -> ProxyToxic:
        """Apply a PATCH body to a toxic and restart it on every open connection."""
        current = self.find_toxic(name)
        if current is None:
            raise TOXIC_NOT_FOUND
        new = updated_toxic(current, body)
        self.toxics[self.toxics.index(current)] = new
        self._rewire(new.direction, new.name)
        return new

    def remove_toxic(self, name: str) -> None:
        """Remove a toxic; its buffered data is flushed (a removed timeout closes)."""
        toxic = self.find_toxic(name)
        if toxic is None:
            raise TOXIC_NOT_FOUND
        self.toxics.remove(toxic)
        self._rewire(toxic.direction, None)

    def reset_toxics(self) -> None:
        """Remove every toxic."""
        self.toxics = []
        for direction in Direction:
            self._rewire(direction, None)

    def _rewire(self, direction: Direction, redraw: str | None) -> None:
        toxics = self.toxics_for(direction)
        for connection in list(self.connections):
            link = connection.links.get(direction)
            if link is not None:
                link.configure(toxics, redraw)
