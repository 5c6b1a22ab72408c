"""Print the confusion set's table (docs/findings.md, "Confusion set"): each case run ``--runs``
times through the plugin, with what was expected, what the findings named and the verdict.

    python tests/confusion/table.py --runs 3 [CASE ...]

It starts one embedded Toxiproxy for all the runs, and runs the cases one after another (each
in a pytest process of its own, as tests/confusion/test_confusion.py does). A markdown table on
stdout, one row per case; progress on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from confusion import Case, Outcome, run_case
from confusion_cases import CASES

from pytest_streamguard import ToxiproxyServer


def named_cell(outcomes: list[Outcome]) -> str:
    """What the runs named: ``blocked_loop`` when every run named the same, else each set with
    its count of runs (``queued 2/3; blocked_loop 1/3``); ``-`` for nothing."""
    sets = Counter(", ".join(o.named) or "-" for o in outcomes)
    if len(sets) == 1:
        return next(iter(sets))
    return "; ".join(f"{named} {n}/{len(outcomes)}" for named, n in sets.most_common())


def verdict_cell(outcomes: list[Outcome]) -> str:
    """``right`` or ``miss``/``false blame`` with the share of runs."""
    verdicts = Counter(o.verdict for o in outcomes)
    runs = len(outcomes)
    return "; ".join(f"{v} {n}/{runs}" for v, n in verdicts.most_common())


def row(case: Case, outcomes: list[Outcome]) -> str:
    expected = ", ".join(sorted(case.expected)) or "-"
    note = case.missing or case.intermittent
    return (
        f"| {case.name} | {case.stack} | {case.kind} | {expected} | {named_cell(outcomes)} "
        f"| {verdict_cell(outcomes)} | {note} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each case (default 3)")
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.cases or c.name in args.cases]
    server = ToxiproxyServer.embedded(startup_timeout=30.0)
    rows = []
    try:
        for case in cases:
            started = time.monotonic()
            outcomes = [run_case(case, server.url) for _ in range(args.runs)]
            took = time.monotonic() - started
            print(f"{case.name}: {verdict_cell(outcomes)} ({took:.1f} s)", file=sys.stderr)
            rows.append(row(case, outcomes))
    finally:
        server.stop()
    print("| app | stack | kind | expected | named | verdict | rule needed / note |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
