"""Whether the headroom gate holds on an unchanged target and fails on a halved one (issue 45).

One ``pytest --streamguard`` run of a test that searches the bundled target's headroom
(``streamguard.headroom(vary="streams")`` under ``token_deadline(ttft=0.5, chunk=0.2,
percentile=95)``) with ``--max-concurrency`` as its capacity saves a baseline
(``--streamguard-save``); then ``--compares`` runs of the same target and as many of one with
half that capacity are compared with it (``--streamguard-compare``, ``--streamguard-compare-fail
headroom:20%``). A row per run: the capacity, the value found with its spread, and whether the
gate failed. The goal: no failure on the unchanged target, every run failing on the halved one::

    python benchmarks/headroom_gate.py --capacity 6 --compares 5
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

INNER_TEST = """
import pytest

REQUEST = {{"prompt": "how many users", "max_new_tokens": {tokens}}}


@pytest.mark.token_deadline(ttft=0.5, chunk=0.2, percentile=95)
def test_capacity(streamguard):
    streamguard.stream(json=REQUEST)  # the target's cold start is not its capacity
    streamguard.headroom(json=REQUEST, vary="streams", up_to={up_to})
"""


def run(workdir: Path, capacity: int, *flags: str) -> tuple[int, str]:
    """One inner pytest run: its exit code and the headroom line it printed."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--streamguard",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--streamguard-target-args",
        f"--max-concurrency {capacity}",
        *flags,
        "test_gate.py",
    ]
    env = {**os.environ, "PYTHONPATH": str(common.ROOT)}
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
    lines = [
        line.strip()
        for line in done.stdout.splitlines()
        if re.search(r"headroom streams \d", line) or "headroom streams:" in line
    ]
    return done.returncode, lines[-1] if lines else done.stdout[-400:]


def main() -> int:
    """Save the baseline, run the compares, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=int, default=6, help="--max-concurrency of the target")
    parser.add_argument("--compares", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=24)
    args = parser.parse_args()
    before = os.getloadavg()[0]
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="headroom-gate-") as tmp:
        workdir = Path(tmp)
        (workdir / "test_gate.py").write_text(
            INNER_TEST.format(tokens=args.tokens, up_to=2 * args.capacity), encoding="utf-8"
        )
        code, line = run(workdir, args.capacity, "--streamguard-save", "base.json")
        rows.append(("baseline", args.capacity, code, line))
        compare = (
            "--streamguard-compare",
            "base.json",
            "--streamguard-compare-fail",
            "headroom:20%",
        )
        for capacity, way in ((args.capacity, "unchanged"), (args.capacity // 2, "halved")):
            for _ in range(args.compares):
                code, line = run(workdir, capacity, *compare)
                rows.append((way, capacity, code, line))
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {common.load_line(before)}")
    print(common.command_line("headroom_gate.py"))
    print(f"# machine: {common.machine()}; whole run {time.perf_counter() - started:.0f} s")
    print("| run | --max-concurrency | pytest exit | headroom line |")
    print("| --- | --- | --- | --- |")
    for way, capacity, code, line in rows:
        print(f"| {way} | {capacity} | {code} | {line.replace('|', '/')} |")
    for way in ("unchanged", "halved"):
        failed = sum(code != 0 for w, _, code, _ in rows if w == way)
        print(f"{way}: the gate failed {failed} of {args.compares}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
