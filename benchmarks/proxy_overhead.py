"""What the embedded Toxiproxy adds to a stream of small chunks, measured against direct.

Run: ``.venv/bin/python benchmarks/proxy_overhead.py`` (about 30 s). It starts a chunk-
streaming upstream in this process and ``streamguard-toxiproxy`` as a subprocess, then runs,
one after the other in the same run:

1. 50 concurrent streams x 20 chunks/s (each stream's phase spread over the 50 ms period,
   like token streams) straight to the upstream;
2. the same through a proxy with no toxic;
3. the same through a proxy with a downstream ``latency`` 100 ms toxic;
4. one bulk transfer through the proxy with no toxic.

Per chunk, latency is the upstream's ``perf_counter_ns()`` stamp written into the chunk to
the client's ``perf_counter_ns()`` when the read returned (one monotonic clock, one
machine). "Added" is the proxied percentile minus the direct one; the latency toxic's error
is ``|latency - 100 ms - direct p50|`` per chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from common import PacedStreamer, index_percentile, start_embedded_proxy, stop

CHUNK_BYTES = 96
BULK_PIECE = 64 * 1024


class Upstream(PacedStreamer):
    """Reads one command line, then streams stamped chunks or bulk bytes."""

    def data_received(self, data: bytes) -> None:
        """Parse ``stream <count> <interval_ns> <phase_ns>`` or ``bulk <bytes>``."""
        self.buffer += data
        if b"\n" in self.buffer and self.task is None:
            words = self.buffer.split(b"\n", 1)[0].decode().split()
            if words[0] == "stream":
                job = self.stream(int(words[1]), int(words[2]), int(words[3]))
            else:
                job = self.bulk(int(words[1]))
            self.task = asyncio.get_running_loop().create_task(job)

    async def stream(self, count: int, interval_ns: int, phase_ns: int) -> None:
        """Send ``count`` chunks, one per interval, each carrying its send stamp."""
        assert self.transport is not None
        start = time.perf_counter_ns() + phase_ns
        for index in range(count):
            wait = start + index * interval_ns - time.perf_counter_ns()
            if wait > 0:
                await asyncio.sleep(wait / 1e9)
            line = f"{index} {time.perf_counter_ns()} ".encode()
            self.transport.write(line.ljust(CHUNK_BYTES - 1, b"x") + b"\n")
        self.transport.close()

    async def bulk(self, size: int) -> None:
        """Send ``size`` bytes as fast as the reader takes them."""
        assert self.transport is not None
        piece = b"b" * BULK_PIECE
        sent = 0
        while sent < size:
            await self.writable.wait()
            self.transport.write(piece)
            sent += len(piece)
        self.transport.close()


@dataclass
class Reader(asyncio.Protocol):
    """Client side: stamps each read and records per-chunk latency in ms."""

    latencies: list[float] = field(default_factory=list)
    received: int = 0
    done: asyncio.Future[None] | None = None
    pending: bytes = b""
    bulk: bool = False

    def data_received(self, data: bytes) -> None:
        """Every complete line gets the read's stamp (bulk reads are only counted)."""
        now = time.perf_counter_ns()
        self.received += len(data)
        if self.bulk:
            return
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            parts = line.split(b" ", 2)
            if len(parts) >= 2 and parts[1].isdigit():
                self.latencies.append((now - int(parts[1])) / 1e6)

    def connection_lost(self, exc: Exception | None) -> None:
        """The upstream finished."""
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


def factory(reader: Reader) -> Callable[[], Reader]:
    """A protocol factory returning ``reader``."""
    return lambda: reader


async def run_streams(port: int, streams: int, rate: int, seconds: float) -> list[float]:
    """``streams`` concurrent streams at ``rate`` chunks/s; returns every chunk's latency."""
    loop = asyncio.get_running_loop()
    interval = 1_000_000_000 // rate
    count = int(seconds * rate)
    readers: list[Reader] = []
    for index in range(streams):
        reader = Reader(done=loop.create_future())
        transport, _ = await loop.create_connection(factory(reader), "127.0.0.1", port)
        phase = index * interval // streams
        transport.write(f"stream {count} {interval} {phase + 100_000_000}\n".encode())
        readers.append(reader)
    await asyncio.wait_for(
        asyncio.gather(*(r.done for r in readers if r.done is not None)), seconds + 30
    )
    return [latency for reader in readers for latency in reader.latencies]


async def run_bulk(port: int, size: int) -> float:
    """One bulk transfer; returns MB/s (10^6 bytes)."""
    loop = asyncio.get_running_loop()
    reader = Reader(done=loop.create_future(), bulk=True)
    transport, _ = await loop.create_connection(lambda: reader, "127.0.0.1", port)
    started = time.perf_counter()
    transport.write(f"bulk {size}\n".encode())
    assert reader.done is not None
    await asyncio.wait_for(reader.done, 120)
    elapsed = time.perf_counter() - started
    return reader.received / elapsed / 1e6


async def bench(args: argparse.Namespace, api: str) -> dict[str, float]:
    """Run every phase and return the figures."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Upstream, "127.0.0.1", 0)
    up_port = server.sockets[0].getsockname()[1]
    async with httpx.AsyncClient(base_url=api) as client:

        async def proxy(name: str) -> int:
            body = {"name": name, "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{up_port}"}
            response = await client.post("/proxies", json=body)
            response.raise_for_status()
            return int(response.json()["listen"].rsplit(":", 1)[1])

        plain = await proxy("bench_plain")
        slow = await proxy("bench_latency")
        toxic = {"type": "latency", "attributes": {"latency": 100, "jitter": 0}}
        (await client.post("/proxies/bench_latency/toxics", json=toxic)).raise_for_status()

        async def run(port: int) -> list[float]:
            return await run_streams(port, args.streams, args.rate, args.seconds)

        direct = await run(up_port)
        proxied = await run(plain)
        delayed = await run(slow)
        bulk_direct = await run_bulk(up_port, args.bulk_mb * 1_000_000)
        bulk_proxied = await run_bulk(plain, args.bulk_mb * 1_000_000)
    server.close()
    base = index_percentile(direct, 0.5)
    errors = [abs(value - 100.0 - base) for value in delayed]
    return {
        "chunks": float(len(proxied)),
        "direct_p50": base,
        "direct_p99": index_percentile(direct, 0.99),
        "proxied_p50": index_percentile(proxied, 0.5),
        "proxied_p99": index_percentile(proxied, 0.99),
        "added_p50": index_percentile(proxied, 0.5) - base,
        "added_p99": index_percentile(proxied, 0.99) - index_percentile(direct, 0.99),
        "latency_err_p50": index_percentile(errors, 0.5),
        "latency_err_p99": index_percentile(errors, 0.99),
        "bulk_direct": bulk_direct,
        "bulk_proxied": bulk_proxied,
    }


def main() -> int:
    """Print the table; exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--rate", type=int, default=20, help="chunks per second per stream")
    parser.add_argument("--seconds", type=float, default=6.0, help="per streaming phase")
    parser.add_argument("--bulk-mb", type=int, default=500)
    args = parser.parse_args()
    proc, port = start_embedded_proxy()
    try:
        figures = asyncio.run(bench(args, f"http://127.0.0.1:{port}"))
    finally:
        stop(proc, group=True)
    rows = [
        ("added latency p50 (ms)", figures["added_p50"], "<= 0.5", figures["added_p50"] <= 0.5),
        ("added latency p99 (ms)", figures["added_p99"], "<= 2", figures["added_p99"] <= 2),
        (
            "latency 100 ms toxic error p99 (ms)",
            figures["latency_err_p99"],
            "<= 3",
            figures["latency_err_p99"] <= 3,
        ),
        (
            "bulk throughput (MB/s)",
            figures["bulk_proxied"],
            ">= 100",
            figures["bulk_proxied"] >= 100,
        ),
    ]
    print(
        f"{args.streams} streams x {args.rate} chunks/s x {args.seconds:g} s per phase, "
        f"{int(figures['chunks'])} chunks of {CHUNK_BYTES} B through the proxy; "
        f"direct p50 {figures['direct_p50']:.3f} ms, p99 {figures['direct_p99']:.3f} ms; "
        f"proxied p50 {figures['proxied_p50']:.3f} ms, p99 {figures['proxied_p99']:.3f} ms; "
        f"latency-toxic error p50 {figures['latency_err_p50']:.3f} ms; "
        f"bulk direct {figures['bulk_direct']:.0f} MB/s"
    )
    print()
    print("| metric | measured | target | met |")
    print("| --- | ---: | --- | --- |")
    for name, value, target, met in rows:
        print(f"| {name} | {value:.3f} | {target} | {'yes' if met else 'NO'} |")
    return 0 if all(row[3] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
