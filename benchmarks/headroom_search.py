"""What a headroom search costs and how repeatable its answer is, on the bundled target.

One ``pytest --streamguard`` run (the plugin as a user runs it: the bundled target with the
tiny offline model, the embedded Toxiproxy, ``--streamguard-seed``) of a test that calls
``streamguard.headroom(vary="streams")`` ``--repeats`` times in a row, on one target, judged by
``token_deadline(ttft=0.5, chunk=0.2, percentile=95)`` (the concurrency incident's deadline,
as ``tests/resilience/test_capacity.py`` uses it). One row per search: the value found, the
level that broke, the loads it spent (against the bound ``floor(log2(up_to)) + 3`` of a target
that behaves the same each time), its wall time, the hop's forwarding p99 at the level that
broke, and what broke it; then the spread of the value over the repeats::

    python benchmarks/headroom_search.py --repeats 5 --up-to 64
    python benchmarks/headroom_search.py --up-to 256 --target-args "--max-concurrency 512"

The bundled target refuses streams over its ``--max-concurrency`` (64 by default), so a search
past 64 needs the second form.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

from pytest_streamguard.headroom.search import max_runs

INNER_TEST = """
import json
import os
import time

import pytest

REPEATS = {repeats}


@pytest.mark.token_deadline(ttft=0.5, chunk=0.2, percentile=95)
def test_searches(streamguard):
    # The target's first stream is its cold start, not its capacity.
    streamguard.stream(json={request!r})
    with open(os.environ["HEADROOM_BENCH_OUT"], "a", encoding="utf-8") as out:
        for _ in range(REPEATS):
            started = time.perf_counter()
            found = streamguard.headroom(json={request!r}, vary="streams", up_to={up_to})
            wall = time.perf_counter() - started
            out.write(json.dumps({{"wall_s": wall, **found.to_dict()}}) + "\\n")
            out.flush()
"""


def run_searches(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    """Run the inner pytest and read back each search."""
    request = {"prompt": "how many users", "max_new_tokens": args.tokens}
    test = workdir / "test_headroom_bench.py"
    test.write_text(
        INNER_TEST.format(repeats=args.repeats, request=request, up_to=args.up_to),
        encoding="utf-8",
    )
    out = workdir / "searches.jsonl"
    env = {
        **os.environ,
        "HEADROOM_BENCH_OUT": str(out),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(common.ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--streamguard",
        "--streamguard-seed",
        str(args.seed),
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-q",
        str(test),
    ]
    if args.target_args:
        command += ["--streamguard-target-args", args.target_args]
    result = subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"the inner pytest failed:\n{result.stdout}\n{result.stderr}")
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def _forwarding_ms(search: dict[str, Any]) -> str:
    at = search["broke_at"] if search["broke_at"] is not None else search["value"]
    levels = [lv for lv in search["levels"] if lv["level"] == at]
    p99 = levels[-1]["figures"].get("forwarding_p99_s") if levels else None
    return "-" if p99 is None else f"{p99 * 1e3:.1f}"


def main() -> int:
    """Run the searches and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--up-to", type=int, default=64, help="the search's up_to (streams)")
    parser.add_argument("--tokens", type=int, default=32, help="max_new_tokens per stream")
    parser.add_argument("--seed", type=int, default=7, help="--streamguard-seed")
    parser.add_argument("--target-args", default="", help="extra arguments for the bundled target")
    args = parser.parse_args()
    before = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="headroom-bench-") as tmp:
        searches = run_searches(args, Path(tmp))
    total = time.perf_counter() - started
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {common.load_line(before)}")
    print(common.command_line("headroom_search.py"))
    print(f"# machine: {common.machine()}; whole run {total:.0f} s (target start included)")
    print(
        "| search | value (streams) | broke at | loads (bound "
        f"{max_runs(args.up_to)}) | wall s | forwarding p99 ms at the boundary | what broke it |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for number, search in enumerate(searches, start=1):
        broke = "-" if search["broke_at"] is None else f"{search['broke_at']:g}"
        cause = search["cause"].split("; likely cause")[0] or "every level held"
        print(
            f"| {number} | {search['value']:g} | {broke} | {search['runs']} | "
            f"{search['wall_s']:.1f} | {_forwarding_ms(search)} | {cause} |"
        )
    values = [s["value"] for s in searches]
    walls = [s["wall_s"] for s in searches]
    runs = [s["runs"] for s in searches]
    print(
        f"\nvalue: min {min(values):g}, median {statistics.median(values):g}, max "
        f"{max(values):g} (spread {max(values) - min(values):g} streams); loads: median "
        f"{statistics.median(runs):g}, max {max(runs)}; wall: median "
        f"{statistics.median(walls):.1f} s, max {max(walls):.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
