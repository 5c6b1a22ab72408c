"""What keeping a started process's output costs (``pytest_streamguard.services.output``).

Two measures:

1. **Memory**: a process that prints ``--flood-mb`` MB (100-byte lines), and one that prints a
   single line that long, started as the plugin starts a target
   (:class:`~pytest_streamguard.services.processes.ManagedProcess`); once its pipe is read to
   the end, the size of its :class:`~pytest_streamguard.services.output.OutputLog` (the kept
   strings and the two lists that hold them, ``sys.getsizeof``), the lines kept and dropped,
   and the time the reader took. Issue 43's bound: at most 10 MB for a process printing 100 MB.
2. **Streams**: a small SSE server (asyncio, OpenAI chat chunks) that prints a log line per
   chunk, read by ``--streams`` concurrent streams (the plugin's load, in this process, where
   the output's reader thread runs too) with its output kept (a ``ManagedProcess``) and thrown
   away (stdout to ``/dev/null``), ``--rounds`` rounds, the order alternating; TTFT p50 and p99
   and the gaps' p99 of each round, their medians, the median of the paired differences with
   its 95 % bootstrap interval, and the noise (the median difference between two rounds of
   the same way). Beside it, the mechanism's own cost, which the rounds' noise may not
   resolve: the time each read of the kept pipe took to split and keep (the reader thread
   holds the GIL for it, so a chunk read meanwhile is stamped that much later at most), p50,
   p99 and max over every read of the rounds. Issue 43's bound: at most 0.1 ms on TTFT and
   gap p99 at 100 streams::

    python benchmarks/output_cost.py
    python benchmarks/output_cost.py --streams 100 --rounds 6 --tokens 40 --flood-mb 100
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import socket
import statistics
import subprocess
import sys
import time

import common

from pytest_streamguard.load import LoadPlan, run
from pytest_streamguard.services import output
from pytest_streamguard.services.output import OutputLog
from pytest_streamguard.services.processes import ManagedProcess, free_port
from pytest_streamguard.stream.client import StreamRecorder
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.verdict.stats import percentile

BOUND_MB = 10.0
BOUND_MS = 0.1
#: The fewest rounds whose bootstrap interval is judged against the bound.
MIN_ROUNDS = 10
SERVER = r"""
import asyncio, json, sys

async def handle(reader, writer):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return  # a connect that only checked the port
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    body = json.loads(await reader.readexactly(length) or b"{}")
    tokens, interval = body["tokens"], body["interval_s"]
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                 b"connection: close\r\n\r\n")
    for i in range(tokens):
        await asyncio.sleep(interval)
        delta = {"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]}
        writer.write(f"data: {json.dumps(delta)}\n\n".encode())
        print(f"INFO: stream {id(writer):x} wrote chunk {i} of {tokens}", flush=True)
        await writer.drain()
    writer.write(b"data: [DONE]\n\n")
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]), backlog=1024)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def log_bytes(log: OutputLog) -> int:
    """What the log holds in memory: its lines and the two lists of lines and stamps."""
    texts, stamps = log._lines, log._stamps
    return (
        sum(sys.getsizeof(t) for t in texts)
        + sys.getsizeof(texts)
        + sys.getsizeof(stamps)
        + sum(sys.getsizeof(s) for s in stamps)
    )


def flood(code: str) -> tuple[OutputLog, float]:
    """The log of ``python -c code`` read to its end, and the seconds that took."""
    started = time.perf_counter()
    process = ManagedProcess("flood", [sys.executable, "-c", code])
    process.popen.wait(600)
    process._reader.join(600)
    seconds = time.perf_counter() - started
    process.stop()
    return process.output, seconds


def memory_rows(megabytes: int) -> list[str]:
    """One row per flood: what was printed, what the log keeps."""
    lines = megabytes * 10_000
    floods = {
        f"{megabytes} MB in 100-byte lines": (
            f"import sys\nw = sys.stdout.write\nfor i in range({lines}): w('x' * 99 + '\\n')"
        ),
        f"{megabytes // 10} MB in 2-byte lines": (
            f"import sys\nw = sys.stdout.write\nfor i in range({megabytes * 50_000}): w('x\\n')"
        ),
        f"{megabytes} MB in one line": (
            f"import sys\nfor i in range({megabytes}): sys.stdout.write('x' * 1_000_000)"
        ),
    }
    rows = [
        f"{'printed':32} {'kept MB':>8} {'lines kept':>11} {'dropped':>9} {'cut':>4} "
        f"{'read s':>7}  bound {BOUND_MB:g} MB"
    ]
    for name, code in floods.items():
        log, seconds = flood(code)
        kept = log_bytes(log) / 1e6
        verdict = "within" if kept <= BOUND_MB else "over"
        rows.append(
            f"{name:32} {kept:8.2f} {log.count - log.dropped:11,} {log.dropped:9,} {log.cut:4} "
            f"{seconds:7.1f}  {verdict}"
        )
    return rows


def wait_port(port: int, timeout: float = 30.0) -> None:
    """Until something listens on ``port``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def read(url: str, streams: int, body: dict[str, object]) -> tuple[list[float], list[float]]:
    """The TTFTs and gaps (seconds) of one load."""
    request = StreamRequest("POST", f"{url}/v1/chat/completions", json_body=body, format="openai")
    result = run(LoadPlan(n=streams), lambda i: StreamRecorder(request, f"stream {i + 1}"))
    assert all(t.completed for t in result.traces), [t.error for t in result.traces if t.error]
    return [t.ttft for t in result.traces if t.ttft is not None], [
        g for t in result.traces for g in t.gaps
    ]


def _p99s(ttfts: list[float], gaps: list[float]) -> list[float]:
    """TTFT p50 and p99 and gap p99 of one load, in ms."""
    return [1000 * (percentile(v, q) or 0.0) for v, q in ((ttfts, 50), (ttfts, 99), (gaps, 99))]


def ci95(values: list[float], draws: int = 4000) -> tuple[float, float]:
    """A 95 % bootstrap interval of the median of ``values`` (the rounds resampled)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def timed_reads() -> list[int]:
    """Time every read a process's output reader keeps from now on (its split and its
    ``add_lines``, in ns), into the list returned."""
    holds: list[int] = []
    keep = output._Lines.feed

    def feed(self: output._Lines, block: bytes) -> None:
        started = time.perf_counter_ns()
        keep(self, block)
        holds.append(time.perf_counter_ns() - started)

    output._Lines.feed = feed  # type: ignore[method-assign]
    return holds


def stream_rows(streams: int, rounds: int, tokens: int, interval: float) -> list[str]:
    """TTFT p50/p99 and gap p99 with the output kept and thrown away (each the median over the
    rounds), the median of the rounds' paired differences, and the noise: the median
    difference between two loads of the same way in a row."""
    kept_port, dropped_port = free_port(), free_port()
    holds = timed_reads()
    kept = ManagedProcess("kept", [sys.executable, "-c", SERVER, str(kept_port)])
    dropped = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(dropped_port)], stdout=subprocess.DEVNULL
    )
    body: dict[str, object] = {"tokens": tokens, "interval_s": interval}
    per_round: dict[str, list[list[float]]] = {"kept": [], "dropped": []}
    try:
        wait_port(kept_port)
        wait_port(dropped_port)
        urls = {
            way: f"http://127.0.0.1:{port}"
            for way, port in (("kept", kept_port), ("dropped", dropped_port))
        }
        for k in range(rounds):
            for way in ("kept", "dropped") if k % 2 == 0 else ("dropped", "kept"):
                per_round[way].append(_p99s(*read(urls[way], streams, body)))
        lines = kept.output.count
    finally:
        kept.stop()
        common.stop(dropped)

    def median(rows: list[list[float]]) -> list[float]:
        return [statistics.median(column) for column in zip(*rows, strict=True)]

    kept_rows, dropped_rows = per_round["kept"], per_round["dropped"]
    paired = [
        [a - b for a, b in zip(x, y, strict=True)]
        for x, y in zip(kept_rows, dropped_rows, strict=True)
    ]
    diff = median(paired)
    low_high = [ci95(list(column)) for column in zip(*paired, strict=True)]
    noise = median(
        [
            [abs(a - b) for a, b in zip(x, y, strict=True)]
            for x, y in itertools.pairwise(dropped_rows)
        ]
    )
    rows = [
        f"{'output (median of rounds)':28} {'TTFT p50':>9} {'TTFT p99':>9} {'gap p99':>8}  (ms)"
    ]
    for label, values in (
        ("thrown away (/dev/null)", median(dropped_rows)),
        ("kept (OutputLog)", median(kept_rows)),
    ):
        rows.append(f"{label:28} " + " ".join(f"{v:9.3f}" for v in values))
    hold = [percentile([h / 1e6 for h in holds], q) or 0.0 for q in (50, 99, 100)]
    # The p99s' paired differences decide where their 95 % interval lies wholly on one side of
    # the bound; else the mechanism's cost (the reader's p99 hold) is what bounds the shift.
    if rounds < MIN_ROUNDS:
        judged = f"not judged (an interval needs {MIN_ROUNDS} rounds or more)"
    elif all(high <= BOUND_MS for _, high in low_high[1:]):
        judged = "within"
    elif any(low > BOUND_MS for low, _ in low_high[1:]):
        judged = "over"
    else:
        judged = "not resolved by the streams; the reader's p99 hold " + (
            "is within" if hold[1] <= BOUND_MS else "is over"
        )
    rows.append(
        f"{'kept - thrown away':28} "
        + " ".join(f"{d:+9.3f}" for d in diff)
        + f"  bound +{BOUND_MS:g} ms on p99: {judged}"
    )
    rows.append(
        f"{'95 % interval of that':28} "
        + " ".join(f"{f'{low:+.2f}..{high:+.2f}':>9}" for low, high in low_high)
    )
    rows.append(f"{'noise (same way, round to round)':28} " + " ".join(f"{d:9.3f}" for d in noise))
    rows.append(
        f"{'a read kept (GIL held)':28} p50 {1000 * hold[0]:.1f} us, p99 {1000 * hold[1]:.1f} us, "
        f"max {1000 * hold[2]:.1f} us over {len(holds):,} reads"
    )
    rows.append(f"({lines:,} lines kept by the log over {rounds} rounds of {streams} streams)")
    return rows


def main() -> int:
    """Print both tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--flood-mb", type=int, default=100)
    parser.add_argument("--only", choices=("memory", "streams"), default=None)
    args = parser.parse_args()
    before = os.getloadavg()[0]
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {common.machine()}")
    print(common.command_line("output_cost.py"))
    if args.only != "streams":
        print("\n".join(memory_rows(args.flood_mb)))
    if args.only != "memory":
        print("\n".join(stream_rows(args.streams, args.rounds, args.tokens, args.interval)))
    print(f"# {common.load_line(before)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
