"""What judging by the client costs a load: the same load of the openai format read by the
plugin's reader alone (``client=none``) and judged by the ``openai`` client (``client=openai``).

The example app (``examples/stream_app.py``, started here on a free port) streams
``/v1/completions`` with ``"stream": true``; each round reads the load both ways, in turn
(which goes first alternates), as ``streamguard.load()`` does: the load on a private loop, then
each trace judged (:func:`pytest_streamguard.judge.judge_trace`) with the cyclic collector
paused (:func:`pytest_streamguard.judge.ruling.collector_paused`). One row per way: the median
wall time of a round's load (the load and its judging), the ratio to the reader alone (the
goal: at most 1.25x on 200 streams of 50 events 10 ms apart), TTFT p50 and p99 over every
stream of every round, the CPU time judging took per stream (median of the rounds), and how
many streams completed and how many the reader and the client disagree on::

    python benchmarks/judge_cost.py --streams 200 --tokens 50 --interval 0.01 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import common

from pytest_streamguard.judge import NONE, judge_trace
from pytest_streamguard.judge.ruling import collector_paused
from pytest_streamguard.load import LoadPlan, LoadResult, run
from pytest_streamguard.stream.client import StreamRecorder
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.verdict.stats import percentile

WAYS = (NONE, "openai")


def read_load(
    url: str, streams: int, body: dict[str, object], client: str
) -> tuple[float, float, LoadResult]:
    """One load read with ``client=`` as ``streamguard.load()`` reads it: its wall time in
    seconds, the CPU seconds its judging took, and its result."""
    request = StreamRequest("POST", f"{url}/v1/completions", json_body=body, format="openai")
    started = time.perf_counter()
    result = run(LoadPlan(n=streams), lambda i: StreamRecorder(request, f"stream {i + 1}"))
    judging = time.thread_time()
    with collector_paused():
        for trace in result.traces:
            judge_trace(trace, client)
    judging = time.thread_time() - judging
    return time.perf_counter() - started, judging, result


def _ms(seconds: float | None) -> str:
    return common.cell(None if seconds is None else seconds * 1000)


def main() -> int:
    """Run the rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=64, help="tokens per stream")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between tokens")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    body = {"prompt": "hi", "max_new_tokens": args.tokens, "interval_s": args.interval}
    body["stream"] = True
    app, line = common.start_json(
        [sys.executable, str(common.ROOT / "examples" / "stream_app.py"), "--port", "0"]
    )
    walls: dict[str, list[float]] = {way: [] for way in WAYS}
    cpus: dict[str, list[float]] = {way: [] for way in WAYS}
    ttfts: dict[str, list[float]] = {way: [] for way in WAYS}
    done: dict[str, int] = dict.fromkeys(WAYS, 0)
    disagree: dict[str, int] = dict.fromkeys(WAYS, 0)
    try:
        read_load(line["url"], args.streams, body, "openai")  # warm up: imports, connections
        for number in range(args.rounds):
            for way in WAYS if number % 2 == 0 else WAYS[::-1]:
                wall, cpu, result = read_load(line["url"], args.streams, body, way)
                walls[way].append(wall)
                cpus[way].append(cpu / args.streams)
                ttfts[way].extend(t.ttft for t in result.traces if t.ttft is not None)
                done[way] += sum(trace.completed for trace in result.traces)
                disagree[way] += sum(trace.reader_agrees is False for trace in result.traces)
    finally:
        common.stop(app, group=True)
    print(common.command_line("judge_cost.py"))
    print(f"# machine: {common.machine()}")
    print(
        "| client= | wall s (median) | ratio | TTFT p50 ms | TTFT p99 ms "
        "| judging CPU ms/stream | completed | disagree |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    base = statistics.median(walls[NONE])
    for way in WAYS:
        wall = statistics.median(walls[way])
        p50, p99 = (percentile(ttfts[way], q) for q in (50, 99))
        total = args.streams * args.rounds
        print(
            f"| `{way}` | {wall:.3f} | {wall / base:.2f}x | {_ms(p50)} | {_ms(p99)} | "
            f"{_ms(statistics.median(cpus[way]))} | {done[way]}/{total} | {disagree[way]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
