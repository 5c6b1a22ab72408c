"""What judging by the client costs a load: the same load of the openai format read by the
plugin's reader alone (``client=none``), judged by the ``openai`` client (``client=openai``),
and judged by it in this process alone, stream after stream (``openai, here alone``: as before
the judging pool).

The example app (``examples/stream_app.py``, started here on a free port) streams
``/v1/completions`` with ``"stream": true``; each round reads the load each way, in turn (the
order reverses every other round), as ``streamguard.load()`` does: the load on a private loop,
then its traces judged (:func:`pytest_streamguard.judge.parallel.judge_traces`: here and in the
judging pool on the other cores, started by the warm-up round). One row per way: the median
wall time of a round's load (the load and its judging), the ratio to the reader alone (the
goal: at most 1.3x), the median CPU seconds this process's thread spent judging (what the
judging pool takes off it; on a machine whose cores other work keeps busy the wall time
cannot show it), TTFT p50 and p99 over every stream of every round, and how many streams
completed and how many the reader and the client disagree on::

    python benchmarks/judge_cost.py --streams 200 --tokens 64 --interval 0.05 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import common

from pytest_streamguard.judge import NONE, judge_trace
from pytest_streamguard.judge.parallel import judge_traces
from pytest_streamguard.load import LoadPlan, LoadResult, run
from pytest_streamguard.stream.client import StreamRecorder
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.verdict.stats import percentile

# The third way judges as before the judging pool: every stream in this process, in turn.
HERE = "openai, here alone"
WAYS = (NONE, "openai", HERE)


def read_load(
    url: str, streams: int, body: dict[str, object], way: str
) -> tuple[float, float, LoadResult]:
    """One load read with ``client=`` as ``streamguard.load()`` reads it (or, ``HERE``, judged
    in this process alone): its wall time in seconds, the CPU seconds this process's thread
    spent judging, and its result."""
    request = StreamRequest("POST", f"{url}/v1/completions", json_body=body, format="openai")
    started = time.perf_counter()
    result = run(LoadPlan(n=streams), lambda i: StreamRecorder(request, f"stream {i + 1}"))
    cpu = time.thread_time()
    if way == HERE:
        for trace in result.traces:
            judge_trace(trace, "openai")
    else:
        judge_traces(result.traces, way)
    cpu = time.thread_time() - cpu
    return time.perf_counter() - started, cpu, result


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
        # Warm up: imports, connections, the judging pool.
        read_load(line["url"], args.streams, body, "openai")
        for number in range(args.rounds):
            for way in WAYS if number % 2 == 0 else WAYS[::-1]:
                wall, cpu, result = read_load(line["url"], args.streams, body, way)
                walls[way].append(wall)
                cpus[way].append(cpu)
                ttfts[way].extend(t.ttft for t in result.traces if t.ttft is not None)
                done[way] += sum(trace.completed for trace in result.traces)
                disagree[way] += sum(trace.reader_agrees is False for trace in result.traces)
    finally:
        common.stop(app, group=True)
    print(common.command_line("judge_cost.py"))
    print(f"# machine: {common.machine()}")
    print(
        "| client= | wall s (median) | ratio | judging CPU s here | TTFT p50 ms | TTFT p99 ms "
        "| completed | disagree |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    base = statistics.median(walls[NONE])
    for way in WAYS:
        wall = statistics.median(walls[way])
        p50, p99 = (percentile(ttfts[way], q) for q in (50, 99))
        total = args.streams * args.rounds
        print(
            f"| `{way}` | {wall:.3f} | {wall / base:.2f}x | {statistics.median(cpus[way]):.3f} | "
            f"{_ms(p50)} | {_ms(p99)} | {done[way]}/{total} | {disagree[way]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
