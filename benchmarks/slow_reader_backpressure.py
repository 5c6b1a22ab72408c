"""How many bytes a server has written when a slow reader first makes its writes wait.

Run: ``python benchmarks/slow_reader_backpressure.py`` (under a minute). A server with the
kernel's default socket buffers (a blocking socket in a thread of this process; it sets no
socket option) answers each request with an SSE stream of ``--answer`` bytes in events of
``--event`` bytes, written as fast as each ``sendall`` returns, and stamps when each write
returns. A write that returns ``--wait-ms`` or more after it was called waited on the reader:
the bytes written before it are the bytes in flight at which the reader stalled the server
(in the server's send buffer, the proxy's sockets and memory, the client's receive buffer and
its unread queue). Each row reads one stream for ``--seconds`` and stops.

Rows: the plugin's ``faults.slow_reader(rate)`` through the embedded Toxiproxy (its client, its
proxy toxic and the buffers both bound for it), and the same rate read by a client that only
paces its reads (no fault, the kernel's default buffers, no proxy) for comparison. The table is
Markdown; ``never`` means no write waited while the stream was read, so the whole answer fit in
the buffers.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

from pytest_streamguard.faults.inject import FaultLog, Faults
from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI, ToxiproxyServer
from pytest_streamguard.stream.client import StreamRecorder, aread_stream
from pytest_streamguard.stream.request import ReadLimits, StreamRequest

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"connection: close\r\n\r\n"
)


@dataclass
class Writes:
    """What the server stamped for one answer: (bytes written so far, seconds the write
    took) per write, in order."""

    done: threading.Event = field(default_factory=threading.Event)
    writes: list[tuple[int, float]] = field(default_factory=list)
    # The write under way: (bytes written before it, when it was called), None between writes.
    pending: tuple[int, float] | None = None

    def first_wait(self, wait_s: float) -> int | None:
        """Bytes written before the first write that took ``wait_s`` or more (or has been
        under way that long); None if none."""
        for written, took in self.writes:
            if took >= wait_s:
                return written
        pending = self.pending
        if pending is not None and time.perf_counter() - pending[1] >= wait_s:
            return pending[0]
        return None


class StampingServer:
    """One answer per connection, from a thread per connection, on a loopback port."""

    def __init__(self, answer: int, event: int, sndbuf: int | None = None) -> None:
        self.answer = answer
        self.sndbuf = sndbuf
        self.event = b"data: " + b"x" * max(event - 8, 1) + b"\n\n"
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.last = Writes()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.last = Writes()
            threading.Thread(target=self._answer, args=(conn, self.last), daemon=True).start()

    def _answer(self, conn: socket.socket, writes: Writes) -> None:
        if self.sndbuf is not None:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                data = conn.recv(4096)
                if not data:
                    return
                request += data
            written = 0
            try:
                conn.sendall(HEAD)
                written += len(HEAD)
                while written < self.answer:
                    started = time.perf_counter()
                    writes.pending = (written, started)
                    conn.sendall(self.event)
                    writes.pending = None
                    writes.writes.append((written, time.perf_counter() - started))
                    written += len(self.event)
                conn.sendall(b"event: done\ndata: {}\n\n")
            except OSError:
                pass
            finally:
                writes.done.set()

    def close(self) -> None:
        """Stop accepting."""
        self.listener.close()


def read_for(url: str, seconds: float, rate: float) -> None:
    """Read the answer at ``url`` with the plugin's client, paced to ``rate``, for at most
    ``seconds``."""
    request = StreamRequest(
        "GET",
        url,
        format="sse",
        limits=ReadLimits(first=seconds, gap=seconds, total=seconds),
        slow_reader_bps=rate,
    )
    asyncio.run(aread_stream(StreamRecorder(request, f"slow reader {rate:g} B/s")))


def through_the_fault(
    api: ToxiproxyAPI, server: StampingServer, rate: int, seconds: float
) -> Writes:
    """One stream read through the embedded proxy under ``faults.slow_reader(rate)``."""
    proxy = api.create_proxy(f"bench_backpressure_{rate}", f"127.0.0.1:{server.port}")
    faults = Faults(FaultLog(api, proxy))
    try:
        faults.slow_reader(rate)
        read_for(f"http://{proxy.listen}/", seconds, rate)
    finally:
        faults.clear()
        api.destroy_proxy(proxy)
    return server.last


def paced_only(server: StampingServer, rate: int, seconds: float) -> Writes:
    """One stream read directly by a client that paces its reads with default buffers: a
    blocking socket read in pieces of a tenth of a second of the rate."""
    piece = max(int(rate / 10), 1)
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nhost: bench\r\n\r\n")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not conn.recv(piece):
                break
            time.sleep(piece / rate)
    return server.last


def shown(value: int | None, answer: int) -> str:
    return f"never (whole {answer:,} B answer buffered)" if value is None else f"{value:,}"


def main() -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=2000, help="bytes/s the reader reads")
    parser.add_argument("--answer", type=int, default=8_000_000, help="bytes the server writes")
    parser.add_argument("--event", type=int, default=256, help="bytes per SSE event")
    parser.add_argument("--seconds", type=float, default=4.0, help="of reading per row")
    parser.add_argument("--wait-ms", type=float, default=100.0, help="a write this slow waited")
    parser.add_argument(
        "--server-sndbuf", type=int, default=4096, help="SO_SNDBUF of the second server"
    )
    args = parser.parse_args()
    wait_s = args.wait_ms / 1000
    servers = {
        "default buffers": StampingServer(args.answer, args.event),
        f"SO_SNDBUF {args.server_sndbuf}": StampingServer(
            args.answer, args.event, args.server_sndbuf
        ),
    }
    toxiproxy = ToxiproxyServer.embedded(startup_timeout=30.0)
    api = ToxiproxyAPI(toxiproxy.url)
    rows: list[tuple[str, str, int | None]] = []
    try:
        for name, server in servers.items():
            rows.append(
                (
                    f"faults.slow_reader({args.rate}) through the embedded Toxiproxy",
                    name,
                    through_the_fault(api, server, args.rate, args.seconds).first_wait(wait_s),
                )
            )
            rows.append(
                (
                    f"a reader paced to {args.rate} B/s, no proxy",
                    name,
                    paced_only(server, args.rate, args.seconds).first_wait(wait_s),
                )
            )
    finally:
        api.close()
        toxiproxy.stop()
        for server in servers.values():
            server.close()
    print(
        f"answer {args.answer:,} B in events of {args.event} B; a write that took "
        f"{args.wait_ms:g} ms or more waited on the reader"
    )
    print()
    print("| reader | server | bytes written when the server's writes first waited |")
    print("| --- | --- | ---: |")
    for reader, server_name, value in rows:
        print(f"| {reader} | {server_name} | {shown(value, args.answer)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
