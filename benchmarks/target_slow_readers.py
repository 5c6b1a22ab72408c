"""Slow readers on the bundled target: are they ended, and do the other streams keep their gaps?

Starts ``python -m target_app`` (default settings plus the flags given), attaches N slow
readers (raw sockets with a 4 KiB receive buffer, each asking for 2,000 tokens and reading
``--read-bps`` bytes per second) and, at the same time, M normal clients that stream 64-token
answers one after another for ``--seconds``. Prints one row per target configuration:

- ``cut``: how many slow readers the target ended
  (``streams_cancelled_total{reason="slow_reader"}``, polled every 0.25 s), and ``half`` /
  ``all``: seconds from the start until half of them, and all, were ended;
- ``seen``: how many readers saw their connection end within the run (a reader first reads
  what its receive buffer already holds, at its own slow pace, so this lags the cut) and
  ``event``: how many got the error event (a reader this far behind rarely does);
- how many normal streams completed, and their gaps: as the client saw them, while at least
  one slow reader was still attached (not yet cut), and as the target wrote them (its
  ``sent_ns``).

Issue 20's goal: every slow reader ended and normal gaps under 0.2 s with 50 slow readers
attached::

    .venv/bin/python benchmarks/target_slow_readers.py
    .venv/bin/python benchmarks/target_slow_readers.py --configs "" "--send-timeout 3"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx
from common import rounded_rank_percentile as percentile
from common import start_target, stop
from prometheus_client.parser import text_string_to_metric_families

SLOW_BODY = b'{"prompt": "baba keke", "max_new_tokens": 2000, "ignore_eos": true}'
NORMAL_BODY = {"prompt": "lemu baba", "max_new_tokens": 64, "ignore_eos": True}
RECEIVE_BUFFER = 4096
READ_TICK_S = 0.25
CUT_METRIC = "streamguard_target_streams_cancelled_total"


@dataclass
class SlowResult:
    """What one slow reader saw."""

    read: int = 0
    ended_after: float | None = None
    error_event: bool = False


@dataclass
class NormalResults:
    """Every normal stream's gaps, client-side and target-side, with their arrival times."""

    streams: int = 0
    completed: int = 0
    gaps: list[tuple[float, float]] = field(default_factory=list)
    """(arrival time, gap) per token after the first, on the benchmark's clock."""
    sent_gaps: list[float] = field(default_factory=list)


async def slow_reader(host: str, port: int, read_bps: int, deadline: float) -> SlowResult:
    """Ask for a long answer and read it at ``read_bps`` until the target ends it."""
    result = SlowResult()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Set before connecting, so the window the client advertises stays this small; reads go
    # straight to the socket, with no stream buffer in between to hide the reader's pace.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    head = (
        f"POST /generate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(SLOW_BODY)}\r\n\r\n"
    ).encode()
    per_tick = max(1, int(read_bps * READ_TICK_S))
    tail = b""
    try:
        await loop.sock_connect(sock, (host, port))
        await loop.sock_sendall(sock, head + SLOW_BODY)
        start = time.perf_counter()
        while time.perf_counter() < deadline:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.perf_counter())):
                    data = await loop.sock_recv(sock, per_tick)
            except TimeoutError:
                break
            except OSError:
                data = b""
            if not data:
                result.ended_after = time.perf_counter() - start
                break
            result.read += len(data)
            tail = (tail + data)[-4096:]
            if b"slow reader" in tail:
                result.error_event = True
            await asyncio.sleep(READ_TICK_S)
    finally:
        sock.close()
    return result


async def normal_client(client: httpx.AsyncClient, deadline: float, out: NormalResults) -> None:
    """Stream 64-token answers one after another until ``deadline``."""
    while time.perf_counter() < deadline:
        out.streams += 1
        last: float | None = None
        last_sent: int | None = None
        async with client.stream("POST", "/generate", json=NORMAL_BODY) as response:
            async for line in response.aiter_lines():
                if line.startswith("event: done"):
                    out.completed += 1
                if not line.startswith("data:") or '"index"' not in line:
                    continue
                now = time.perf_counter()
                sent = json.loads(line[5:])["sent_ns"]
                if last is not None and last_sent is not None:
                    out.gaps.append((now, now - last))
                    out.sent_gaps.append((sent - last_sent) / 1e9)
                last, last_sent = now, sent


async def watch_cuts(
    client: httpx.AsyncClient, start: float, deadline: float, cuts: list[tuple[float, float]]
) -> None:
    """Poll the target's slow-reader count until ``deadline``: (seconds from start, count)."""
    while time.perf_counter() < deadline:
        text = (await client.get("/metrics")).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == CUT_METRIC and sample.labels == {"reason": "slow_reader"}:
                    cuts.append((time.perf_counter() - start, sample.value))
        await asyncio.sleep(0.25)


def first_reaching(cuts: list[tuple[float, float]], count: float) -> float:
    """Seconds until the cut count first reached ``count`` (NaN if it never did)."""
    return next((at for at, n in cuts if n >= count), float("nan"))


async def run(
    url: str, slow: int, normal: int, read_bps: int, seconds: float
) -> tuple[list[SlowResult], NormalResults, float, list[tuple[float, float]]]:
    """Slow readers and normal clients together; returns when both are done."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    start = time.perf_counter()
    deadline = start + seconds
    normals = NormalResults()
    limits = httpx.Limits(max_connections=normal, max_keepalive_connections=normal)
    cuts: list[tuple[float, float]] = []
    async with (
        httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client,
        httpx.AsyncClient(base_url=url, timeout=60) as observer,
    ):
        watcher = asyncio.create_task(watch_cuts(observer, start, deadline, cuts))
        slow_tasks = [
            asyncio.create_task(slow_reader(host, int(port), read_bps, deadline))
            for _ in range(slow)
        ]
        await asyncio.gather(*(normal_client(client, deadline, normals) for _ in range(normal)))
        slows = await asyncio.gather(*slow_tasks)
        await watcher
    return list(slows), normals, start, cuts


def row(options: argparse.Namespace, flags: str) -> str:
    """Start a target with ``flags``, run the load, render the results as one table row."""
    process, url = start_target(
        ["--max-concurrency", str(options.slow + options.normal + 2), *shlex.split(flags)]
    )
    try:
        slows, normals, start, cuts = asyncio.run(
            run(url, options.slow, options.normal, options.read_bps, options.seconds)
        )
        seen = [s.ended_after for s in slows if s.ended_after is not None]
        half = first_reaching(cuts, len(slows) / 2)
        every = first_reaching(cuts, len(slows))
        last_cut = options.seconds if every != every else every
        attached = [gap for at, gap in normals.gaps if at - start <= last_cut]
        gaps = [gap for _, gap in normals.gaps]
        cut = cuts[-1][1] if cuts else float("nan")
    finally:
        stop(process, timeout_s=30)
    return (
        f"{flags or '(defaults)':<22}{cut:>4.0f}/{len(slows):<4}{half:>6.1f}{every:>6.1f}"
        f"{len(seen):>6}{sum(s.error_event for s in slows):>6}"
        f"{normals.completed:>6}/{normals.streams:<5}"
        f"{percentile(gaps, 50):>8.3f}{percentile(gaps, 95):>7.3f}{max(gaps, default=0):>7.3f}"
        f"{percentile(attached, 95):>9.3f}{max(attached, default=0):>7.3f}"
        f"{percentile(normals.sent_gaps, 95):>9.3f}{max(normals.sent_gaps, default=0):>7.3f}"
    )


def main() -> int:
    """Parse options, run each configuration, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=50, help="slow readers attached")
    parser.add_argument("--normal", type=int, default=8, help="normal clients")
    parser.add_argument("--read-bps", type=int, default=200, help="bytes/s a slow reader reads")
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each run")
    parser.add_argument(
        "--configs",
        nargs="+",
        default=[""],
        help="target flags per run, one quoted string each ('' = defaults)",
    )
    options = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M')} tiny model, {options.slow} slow readers at "
        f"{options.read_bps} B/s, {options.normal} normal clients x 64 tokens, "
        f"{options.seconds:g} s; uptime: {load}"
    )
    print(
        f"{'target flags':<22}{'cut':>7}  {'half':>6}{'all':>6}{'seen':>6}{'event':>6}"
        f"{'normal ok':>12}{'gap p50':>8}{'p95':>7}{'max':>7}"
        f"{'attached':>9}{'max':>7}{'sent p95':>9}{'max':>7}"
    )
    for flags in options.configs:
        print(row(options, flags), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
