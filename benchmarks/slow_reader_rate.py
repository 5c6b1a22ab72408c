"""How close ``faults.slow_reader(bytes_per_second)`` comes to the rate it is asked for.

Run: ``python benchmarks/slow_reader_rate.py`` (about a minute). It starts
``streamguard-toxiproxy`` as a subprocess and, in a thread of this process, an upstream that
answers every request with an SSE stream of padded events as fast as its reader takes them.
For each asked rate, one stream is read through a proxy with the plugin's own
:class:`~pytest_streamguard.faults.inject.Faults` ``slow_reader`` fault and client (the toxic and
the paced reads with their receive buffer), for about ``--seconds`` seconds of data at that rate.

Delivered is the body bytes read divided by the time from the request to the last read: what a
user of the fault sees. The table is Markdown; the run exits 1 if a rate is off by more than
10 %.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time

from common import PacedStreamer

from pytest_streamguard.faults.inject import FaultLog, Faults
from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI, ToxiproxyServer
from pytest_streamguard.stream.client import StreamRecorder, aread_stream
from pytest_streamguard.stream.request import ReadLimits, StreamRequest

RATES = (
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
)
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"connection: close\r\n\r\n"
)
TOLERANCE = 0.10


class Upstream(PacedStreamer):
    """``GET /?bytes=N&event=E``: N bytes of SSE events of about E bytes, then ``event: done``."""

    def data_received(self, data: bytes) -> None:
        """Start streaming once the request line and headers are in."""
        self.buffer += data
        if b"\r\n\r\n" not in self.buffer or self.task is not None:
            return
        target = self.buffer.split(b" ", 2)[1].decode()
        query = dict(p.split("=") for p in target.partition("?")[2].split("&") if p)
        job = self.stream(int(query["bytes"]), int(query["event"]))
        self.task = asyncio.get_running_loop().create_task(job)

    async def stream(self, size: int, event_bytes: int) -> None:
        """Write the events, respecting the reader's backpressure."""
        assert self.transport is not None
        self.transport.write(HEAD)
        event = b"data: " + b"x" * max(event_bytes - 8, 1) + b"\n\n"
        sent = 0
        while sent < size:
            await self.writable.wait()
            self.transport.write(event)
            sent += len(event)
        self.transport.write(b"event: done\ndata: {}\n\n")
        self.transport.close()


def start_upstream() -> int:
    """Serve :class:`Upstream` on a loopback port from a daemon thread; return the port."""
    ready: list[int] = []
    started = threading.Event()

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Upstream, "127.0.0.1", 0)
        ready.append(server.sockets[0].getsockname()[1])
        started.set()
        await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(serve()), daemon=True).start()
    if not started.wait(10):
        raise RuntimeError("the upstream did not start")
    return ready[0]


def measure(api: ToxiproxyAPI, upstream: int, rate: int, seconds: float) -> tuple[float, int]:
    """Read one slow stream of about ``seconds`` at ``rate``; (delivered B/s, body bytes)."""
    proxy = api.create_proxy(f"bench_slow_reader_{rate}", f"127.0.0.1:{upstream}")
    log = FaultLog(api, proxy)
    faults = Faults(log)
    try:
        faults.slow_reader(rate)
        size = int(rate * seconds)
        event = min(max(rate // 100, 64), 16_000)
        request = StreamRequest(
            "GET",
            f"http://{proxy.listen}/?bytes={size}&event={event}",
            format="sse",
            limits=ReadLimits(first=60, gap=60, total=seconds * 10 + 60),
            slow_reader_bps=log.slow_reader_bps,
        )
        trace = asyncio.run(aread_stream(StreamRecorder(request, f"slow reader {rate} B/s")))
    finally:
        faults.clear()
        api.destroy_proxy(proxy)
    if not trace.completed or not trace.reads:
        raise RuntimeError(f"{rate} B/s: the stream did not complete: {trace.error}")
    elapsed = (trace.reads[-1][0] - trace.request_ns) / 1e9
    return trace.nbytes / elapsed, trace.nbytes


def main() -> int:
    """Print the table; exit 1 if a rate is off by more than 10 %."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="of data per rate")
    parser.add_argument(
        "--rates", type=lambda s: [int(r) for r in s.split(",")], default=list(RATES)
    )
    args = parser.parse_args()
    upstream = start_upstream()
    toxiproxy = ToxiproxyServer.embedded(startup_timeout=30.0)
    api = ToxiproxyAPI(toxiproxy.url)
    rows = []
    try:
        for rate in args.rates:
            started = time.perf_counter()
            delivered, nbytes = measure(api, upstream, rate, args.seconds)
            rows.append((rate, delivered, nbytes, time.perf_counter() - started))
    finally:
        api.close()
        toxiproxy.stop()
    print("| asked (B/s) | delivered (B/s) | delivered / asked | body bytes | within 10 % |")
    print("| ---: | ---: | ---: | ---: | --- |")
    ok = True
    for rate, delivered, nbytes, _ in rows:
        within = abs(delivered / rate - 1) <= TOLERANCE
        ok = ok and within
        print(
            f"| {rate:,} | {delivered:,.0f} | {delivered / rate:.3f} | {nbytes:,} | "
            f"{'yes' if within else 'NO'} |"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
