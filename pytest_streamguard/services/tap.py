"""A tap on a stack's inner hop: when each byte of the answers reached the service in front.

The plugin puts a :class:`Tap` between a service and the proxy in front of the service it
reaches (``{model}`` in the gateway's command is the tap's address): a plain TCP forwarder on
127.0.0.1, in a thread of the pytest process, that passes every byte on as it comes and stamps
each read of the answer side with ``time.perf_counter_ns()`` (the clock of the client's own
stamps). It sits after the hop's proxy, so its stamps are what the service in front received,
faults included. A FIN is passed on as a FIN (half-close) and a reset as a reset.

The stamps are per hop, not per request: :meth:`Tap.reads_between` gives those of a time
window, which the plugin pairs with a client stream when that stream was the only one open
(one stream at a time); with several streams at once, which inner answer belonged to which
stream is not known, and the stream's trace says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time

__all__ = ["Tap"]

_READ_SIZE = 64 * 1024


class Tap:
    """A stamping TCP forwarder to ``upstream`` (``host:port``); :attr:`address` is its own."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host.strip("[]"), int(port))
        self._lock = threading.Lock()
        self._reads: list[tuple[int, int]] = []
        # Every open connection's writers (the loop's thread only), closed by close().
        self._open: set[asyncio.StreamWriter] = set()
        self._sock = socket.create_server(("127.0.0.1", 0))
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
            await asyncio.gather(
                self._pump(client_r, upstream_w, stamped=False),
                self._pump(upstream_r, client_w, stamped=True),
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
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, stamped: bool
    ) -> None:
        """Pass ``reader``'s bytes on to ``writer`` until its end: a FIN is passed on as a FIN,
        a reset (or a write that failed) as a reset."""
        try:
            while data := await reader.read(_READ_SIZE):
                if stamped:
                    with self._lock:
                        self._reads.append((time.perf_counter_ns(), len(data)))
                writer.write(data)
                await writer.drain()
        except OSError:
            _reset(writer)
            return
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()

    def reads_between(self, start_ns: int, end_ns: int) -> list[tuple[int, int]]:
        """``(stamp_ns, bytes)`` of every read of the answers from ``start_ns`` to ``end_ns``."""
        with self._lock:
            return [read for read in self._reads if start_ns <= read[0] <= end_ns]

    def forget_before(self, stamp_ns: int) -> None:
        """Drop the reads before ``stamp_ns`` (a test's end: no later stream needs them)."""
        with self._lock:
            self._reads = [read for read in self._reads if read[0] >= stamp_ns]

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
