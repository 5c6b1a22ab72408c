"""Where each fault lands, per stream: the embedded Toxiproxy and a real ``toxiproxy-server``
side by side (issue 27).

A lean SSE server in a process group of its own (``sse_server.py``, 40 events per stream at
1,000 events/s) is read through each server's proxy with the plugin's own ``StreamGuard``
(``streamguard.load``), as a test would, under each chunk fault:

- ``cut(after_chunks=5)`` and ``reset(after_chunks=5)``: the number of chunks each stream got
  before its connection ended (and how it ended, for the reset; read by ``aload`` on asyncio's
  loop, as uvloop's polling misses a reset);
- ``stall(after_chunks=5, seconds=0.3)``: the chunk after which each stream's longest wait
  came (gap i follows chunk i + 1), and how long that wait was;
- ``cut(after_chunks=5, streams=0.3)``: the same for the streams aimed at (a fraction drawn
  from the seed), and whether every other stream completed with all its chunks;
- the TTFT median of 10 streams under ``cut(after_chunks=30)`` against 10 without a fault,
  alternating, over several rounds (the median of the per-round differences);
- ``freeze(0.5, after_chunks=5)`` on 5 streams: each stream's longest gap (the same on both
  servers: the plugin stops the upstream's process group, not the proxy).

On a real Toxiproxy the chunk faults are refused (it has no chunk toxics, and a toxic added
once the client has seen chunk N lands chunks late); the row then says so, and the message is
printed under the table.

Run: ``python benchmarks/fault_precision.py [--streams 20,100] [--toxiproxy-server PATH]``
(default ``$STREAMGUARD_TOXIPROXY_SERVER``), or ``make bench`` (part ``faults``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from common import command_line, load_line, start_json, start_real_toxiproxy, stop

from pytest_streamguard.faults.inject import log_of
from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI, ToxiproxyServer
from pytest_streamguard.guard import StreamGuard
from pytest_streamguard.services.app import Target
from pytest_streamguard.stream.trace import StreamTrace

HERE = Path(__file__).resolve().parent
TOKENS = 40
INTERVAL_S = 0.001
BODY = {"max_new_tokens": TOKENS, "interval_s": INTERVAL_S}
SEED = 1
TTFT_ROUNDS = 10


@contextmanager
def sse_server() -> Iterator[tuple[str, int]]:
    """``sse_server.py`` in a session of its own (so a freeze stops it alone): URL and pid."""
    process, ready = start_json([sys.executable, str(HERE / "sse_server.py")])
    try:
        yield ready["url"], process.pid
    finally:
        stop(process)


def guard(api: ToxiproxyAPI, name: str, url: str, pid: int) -> StreamGuard:
    """A fresh StreamGuard on a new proxy to the SSE server (its streams count from 0)."""
    proxy = api.create_proxy(name, url.split("://", 1)[1])
    made = StreamGuard(
        api=api,
        proxy=proxy,
        target=Target(url=url, kind="url", description="sse_server.py"),
        deadline=None,
        seed=SEED,
    )
    log_of(made.faults).target_pid = pid
    return made


def spread(values: list[int]) -> str:
    """``chunk 5 on 100 of 100`` or ``5: 98, 6: 2 (of 100)``."""
    counts = collections.Counter(values)
    if len(counts) == 1:
        ((value, n),) = counts.items()
        return f"chunk {value} on {n} of {len(values)}"
    parts = ", ".join(f"{value}: {n}" for value, n in sorted(counts.items()))
    return f"{parts} (chunk: streams, of {len(values)})"


def _landed_stall(trace: StreamTrace) -> tuple[int, float]:
    gaps = trace.gaps
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    return worst + 1, gaps[worst]


Measure = Callable[[ToxiproxyAPI, str, int, str], str]


def cut_at_5(n: int) -> Measure:
    def run(api: ToxiproxyAPI, url: str, pid: int, name: str) -> str:
        sg = guard(api, name, url, pid)
        try:
            sg.faults.cut(after_chunks=5)
            result = sg.load(n, json=BODY)
        finally:
            sg.close()
            api.destroy_proxy(sg.proxy)
        cut = sum(not t.completed for t in result.traces)
        return f"{spread([len(t.chunks) for t in result.traces])}; {cut} of {n} cut"

    return run


def reset_at_5(n: int) -> Measure:
    def run(api: ToxiproxyAPI, url: str, pid: int, name: str) -> str:
        sg = guard(api, name, url, pid)
        try:
            sg.faults.reset(after_chunks=5)
            # On asyncio's own loop: the sync load's uvloop does not see a reset of a socket it
            # polls (libuv stops the poll on POLLERR without calling the reader), and such a
            # stream then waits for its read timeout.
            result = asyncio.run(sg.aload(n, json=BODY))
        finally:
            sg.close()
            api.destroy_proxy(sg.proxy)
        kinds = collections.Counter(str(t.error_kind) for t in result.traces)
        ended = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
        return f"{spread([len(t.chunks) for t in result.traces])}; ended: {ended}"

    return run


def stall_at_5(n: int) -> Measure:
    def run(api: ToxiproxyAPI, url: str, pid: int, name: str) -> str:
        sg = guard(api, name, url, pid)
        try:
            sg.faults.stall(after_chunks=5, seconds=0.3)
            result = sg.load(n, json=BODY)
        finally:
            sg.close()
            api.destroy_proxy(sg.proxy)
        landed = [_landed_stall(t) for t in result.traces]
        waits = [wait for _, wait in landed]
        return (
            f"{spread([chunk for chunk, _ in landed])}; wait {min(waits):.3f} to "
            f"{max(waits):.3f} s; {result.completed} of {n} completed"
        )

    return run


def aimed_cut(n: int) -> Measure:
    def run(api: ToxiproxyAPI, url: str, pid: int, name: str) -> str:
        sg = guard(api, name, url, pid)
        try:
            record = sg.faults.cut(after_chunks=5, streams=0.3)
            result = sg.load(n, json=BODY)
        finally:
            sg.close()
            api.destroy_proxy(sg.proxy)
        aimed = set(record.streams or [])
        hit = [len(t.chunks) for i, t in enumerate(result.traces) if i in aimed]
        others = [t for i, t in enumerate(result.traces) if i not in aimed]
        whole = sum(t.completed and len(t.chunks) == TOKENS for t in others)
        return (
            f"aimed at {len(aimed)}: {spread(hit)}; the other {len(others)}: {whole} "
            f"completed with all {TOKENS} chunks"
        )

    return run


def ttft_under_cut_30(api: ToxiproxyAPI, url: str, pid: int, name: str) -> str:
    medians: dict[str, list[float]] = {"none": [], "cut": []}
    for k in range(TTFT_ROUNDS):
        for mode in ("none", "cut") if k % 2 == 0 else ("cut", "none"):
            sg = guard(api, f"{name}_{k}_{mode}", url, pid)
            try:
                if mode == "cut":
                    sg.faults.cut(after_chunks=30)
                result = sg.load(10, json=BODY)
            finally:
                sg.close()
                api.destroy_proxy(sg.proxy)
            medians[mode].append(statistics.median(t.ttft or 0.0 for t in result.traces))
    diffs = [(c - o) * 1000 for c, o in zip(medians["cut"], medians["none"], strict=True)]
    return (
        f"{statistics.median(medians['cut']) * 1000:.2f} ms under the cut, "
        f"{statistics.median(medians['none']) * 1000:.2f} ms without; per-round difference "
        f"median {statistics.median(diffs):+.2f} ms ({min(diffs):+.2f} to {max(diffs):+.2f}, "
        f"{TTFT_ROUNDS} rounds)"
    )


def freeze_at_5(api: ToxiproxyAPI, url: str, pid: int, name: str) -> str:
    sg = guard(api, name, url, pid)
    try:
        record = sg.faults.freeze(0.5, after_chunks=5)
        result = sg.load(5, json={"max_new_tokens": TOKENS, "interval_s": 0.005})
        log_of(sg.faults).judge(sg.traces)
    finally:
        sg.close()
        api.destroy_proxy(sg.proxy)
    gaps = [t.max_gap or 0.0 for t in result.traces]
    return (
        f"longest gap {min(gaps):.3f} to {max(gaps):.3f} s; {result.completed} of 5 completed; "
        f"fired: {record.fired}"
    )


def refused(measure: Measure, api: ToxiproxyAPI, url: str, pid: int, name: str) -> str:
    """The measure's row, or ``refused`` (the message is kept for under the table)."""
    try:
        return measure(api, url, pid, name)
    except ValueError as exc:
        REFUSALS.setdefault(str(exc), name)
        return "refused (ValueError, below)"


REFUSALS: dict[str, str] = {}


def rows(counts: list[int]) -> list[tuple[str, int, Measure]]:
    """Each row's title, stream count and measure."""
    made: list[tuple[str, int, Measure]] = []
    for n in counts:
        made.append(("cut(after_chunks=5): chunks each stream got", n, cut_at_5(n)))
        made.append(("reset(after_chunks=5): chunks each stream got", n, reset_at_5(n)))
        made.append(
            ("stall(after_chunks=5, seconds=0.3): chunk the wait came after", n, stall_at_5(n))
        )
        made.append(("cut(after_chunks=5, streams=0.3)", n, aimed_cut(n)))
    made.append(("TTFT median under cut(after_chunks=30) vs none", 10, ttft_under_cut_30))
    made.append(("freeze(0.5, after_chunks=5): each stream's longest gap", 5, freeze_at_5))
    return made


def measure(counts: list[int], real: str | None) -> list[tuple[str, int, str, str]]:
    """Every row on the embedded server and (with ``real``) the real one, alternating."""
    table: list[tuple[str, int, str, str]] = []
    embedded = ToxiproxyServer.embedded(startup_timeout=30.0, seed=SEED)
    servers: list[tuple[str, ToxiproxyAPI]] = [("embedded", ToxiproxyAPI(embedded.url))]
    real_process = None
    if real:
        real_process, real_url = start_real_toxiproxy(real)
        servers.append(("real", ToxiproxyAPI(real_url)))
    try:
        with sse_server() as (url, pid):
            for k, (title, n, run) in enumerate(rows(counts)):
                cells = {}
                for kind, api in servers:
                    cells[kind] = refused(run, api, url, pid, f"precision_{kind}_{k}")
                table.append((title, n, cells["embedded"], cells.get("real", "not run")))
    finally:
        for _, api in servers:
            api.close()
        embedded.stop()
        if real_process is not None:
            stop(real_process)
    return table


def table(measured: list[tuple[str, int, str, str]], real: str | None) -> list[str]:
    """The markdown table and the refusal messages."""
    lines = [
        f"| fault ({INTERVAL_S * 1000:g} ms between events, {TOKENS} per stream) | streams | "
        "embedded proxy | real toxiproxy-server |",
        "| --- | ---: | --- | --- |",
    ]
    lines += [f"| {title} | {n} | {emb} | {rl} |" for title, n, emb, rl in measured]
    if real is None:
        lines += ["", "real toxiproxy-server: not run (no --toxiproxy-server PATH)"]
    if REFUSALS:
        # One of them: the others differ only in the call and the toxic's name.
        lines += ["", f"refused ({len(REFUSALS)} calls, each alike), e.g.: {next(iter(REFUSALS))}"]
    return lines


def main() -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", default="20,100", help="stream counts of the chunk rows")
    parser.add_argument(
        "--toxiproxy-server",
        default=os.environ.get("STREAMGUARD_TOXIPROXY_SERVER"),
        help="a real toxiproxy-server (default: $STREAMGUARD_TOXIPROXY_SERVER)",
    )
    options = parser.parse_args()
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    measured = measure([int(n) for n in options.streams.split(",")], options.toxiproxy_server)
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M')} UTC; {os.cpu_count()} CPU cores; "
        f"{load_line(load_before)}; {time.monotonic() - started:.0f} s"
    )
    print(command_line("fault_precision.py"))
    print()
    print("\n".join(table(measured, options.toxiproxy_server)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
