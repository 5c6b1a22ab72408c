"""The embedded Toxiproxy against a real ``toxiproxy-server``: same harness, alternating.

Per stream count (1, 50, 200, 500 and 1,000 by default) and round, streams of 96-byte chunks
at 20 chunks/s (phases spread over the 50 ms period) are read directly from the upstream, then
through each server's proxy with no toxic, the two servers in alternating order. The upstream
runs in a process of its own (``proxy_overhead.Upstream``, uvloop), the reader in this one;
per chunk, latency is the upstream's ``perf_counter_ns()`` stamp to the reader's. "Added" is
the proxied percentile minus the direct one of the same round. Each server's RSS is sampled
during its phases; the table gives its growth over idle per 1,000 connections at the largest
count (a proxied connection is two sockets in the proxy: the client's and the upstream one).

The real server's path: ``--toxiproxy-server PATH`` or ``$STREAMGUARD_TOXIPROXY_SERVER``;
without one only the embedded rows are printed and the comparison is said to be skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import proxy_overhead
from common import (
    index_percentile as pct,
)
from common import (
    make_proxy,
    rss_mib,
    run_loop,
    serve_until_signal,
    start_embedded_proxy,
    start_json,
    start_real_toxiproxy,
    stop,
)

HERE = Path(__file__).resolve().parent
RATE = 20
BACKLOG = 4096


def start_upstream() -> tuple[subprocess.Popen[str], int]:
    """The chunk upstream (``proxy_overhead.Upstream``) in its own process group
    (``--serve-upstream``), and its port."""
    process, ready = start_json([sys.executable, str(Path(__file__).resolve()), "--serve-upstream"])
    return process, int(ready["url"].rsplit(":", 1)[1])


def server_version(path: str) -> str:
    """``toxiproxy-server version 2.12.0``: what ``PATH -version`` says."""
    done = subprocess.run([path, "-version"], capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).strip() or Path(path).name


async def measure(port: int, streams: int, seconds: float, pid: int | None) -> dict[str, Any]:
    """Latencies (ms) of every chunk of ``streams`` streams, and the peak RSS of ``pid``."""
    peak = 0.0

    async def sample() -> None:
        nonlocal peak
        while pid is not None:
            peak = max(peak, rss_mib(pid))
            await asyncio.sleep(0.25)

    sampler = asyncio.ensure_future(sample())
    try:
        latencies = await proxy_overhead.run_streams(port, streams, RATE, seconds)
    finally:
        sampler.cancel()
    return {"latencies": latencies, "rss": peak}


def compare(
    counts: list[int], seconds: float, rounds: int, real_path: str | None
) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    """Every round of every count; per server its idle RSS and peak at the largest count."""
    upstream, up_port = start_upstream()
    embedded, api_port = start_embedded_proxy()
    servers: dict[str, tuple[subprocess.Popen[Any], int]] = {}
    real = None
    try:
        servers["embedded"] = (embedded, make_proxy(f"http://127.0.0.1:{api_port}", up_port))
        if real_path is not None:
            real, real_api = start_real_toxiproxy(real_path)
            servers["real"] = (real, make_proxy(real_api, up_port))
        memory = {name: {"idle": rss_mib(p.pid), "peak": 0.0} for name, (p, _) in servers.items()}
        rows = []
        for streams in counts:
            for index in range(rounds):
                names = sorted(servers)
                if index % 2:
                    names.reverse()
                direct = run_loop(measure(up_port, streams, seconds, None))["latencies"]
                row: dict[str, Any] = {"streams": streams, "round": index + 1, "order": names}
                row["direct"] = (pct(direct, 0.5), pct(direct, 0.99), len(direct))
                for name in names:
                    process, port = servers[name]
                    got = run_loop(measure(port, streams, seconds, process.pid))
                    lat = got["latencies"]
                    row[name] = (pct(lat, 0.5), pct(lat, 0.99), len(lat))
                    if streams == max(counts):
                        memory[name]["peak"] = max(memory[name]["peak"], got["rss"])
                rows.append(row)
    finally:
        if real is not None:
            stop(real, group=True)
        stop(embedded, group=True)
        stop(upstream, group=True)
    return rows, memory


def table(
    rows: list[dict[str, Any]],
    memory: dict[str, dict[str, float]],
    real_path: str | None,
    largest: int,
) -> Iterator[str]:
    """Markdown lines: added latency per server side by side, then the verdicts and RSS."""
    yield (
        "| streams | round | direct p50/p99 ms | embedded added p50 | embedded added p99 | "
        "real added p50 | real added p99 | chunks per phase | order |"
    )
    yield "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"
    for row in rows:
        d50, d99, count = row["direct"]
        cells = []
        for name in ("embedded", "real"):
            if name in row:
                cells += [f"{row[name][0] - d50:.3f}", f"{row[name][1] - d99:.3f}"]
            else:
                cells += ["-", "-"]
        yield (
            f"| {row['streams']} | {row['round']} | {d50:.3f}/{d99:.3f} | {' | '.join(cells)} | "
            f"{count} | {', '.join(row['order'])} |"
        )
    yield ""
    if real_path is None:
        yield (
            "real toxiproxy-server: comparison skipped (give --toxiproxy-server PATH or "
            "STREAMGUARD_TOXIPROXY_SERVER)"
        )
    else:
        yield f"real server: {server_version(real_path)}"
        for streams in sorted({r["streams"] for r in rows}):
            mine = [r for r in rows if r["streams"] == streams]
            text = f"{streams} streams, median over rounds of added ms:"
            for q, label in ((0, "p50"), (1, "p99")):
                e = statistics.median(r["embedded"][q] - r["direct"][q] for r in mine)
                t = statistics.median(r["real"][q] - r["direct"][q] for r in mine)
                verdict = "<=" if e <= t else ">"
                text += f" {label} embedded {e:.3f} {verdict} real {t:.3f};"
            yield text
    for name, figures in memory.items():
        growth = (figures["peak"] - figures["idle"]) * 1000 / largest
        yield (
            f"{name} proxy RSS: idle {figures['idle']:.1f} MiB, peak {figures['peak']:.1f} MiB "
            f"at {largest} streams: +{growth:.1f} MiB per 1,000 proxied "
            "connections (each a client socket and an upstream one)"
        )


def main() -> int:
    """Run the comparison and print it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", default="1,50,200,500,1000")
    parser.add_argument("--seconds", type=float, default=3.0, help="per phase")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--toxiproxy-server",
        default=os.environ.get("STREAMGUARD_TOXIPROXY_SERVER"),
        help="path of a real toxiproxy-server (default: $STREAMGUARD_TOXIPROXY_SERVER)",
    )
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve_upstream:
        run_loop(serve_until_signal(proxy_overhead.Upstream, BACKLOG))
        return 0
    counts = [int(n) for n in options.streams.split(",")]
    rows, memory = compare(counts, options.seconds, options.rounds, options.toxiproxy_server)
    for line in table(rows, memory, options.toxiproxy_server, max(counts)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
