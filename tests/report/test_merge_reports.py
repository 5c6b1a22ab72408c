"""``python -m pytest_streamguard.report A.json B.json -o merged.html --json merged.json``.

Two real runs (different tests, one of them a matrix) are merged; the merged report must hold
each run's per-test records unchanged and the pooled percentiles recomputed from the union of
the raw chunk stamps (checked here with an independent nearest-rank), in the same shape as a
single run of both files together.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_streamguard.report.cli import main

TESTS_A = """
import pytest

@pytest.mark.token_deadline(ttft=2.0, chunk=0.5)
@pytest.mark.parametrize("tokens", [4, 8])
def test_a(streamguard, tokens):
    assert streamguard.stream(json={"max_new_tokens": tokens, "interval_s": 0.01}).completed
"""
TESTS_B = """
import pytest

@pytest.mark.streamguard_matrix("none", "latency-200")
def test_b(streamguard):
    for _ in range(3):
        assert streamguard.stream(json={"max_new_tokens": 6, "interval_s": 0.02}).completed
"""


def nearest_rank(samples: list[float], q: float) -> float:
    """The nearest-rank percentile, computed here independently of the plugin."""
    ordered = sorted(samples)
    return ordered[math.ceil(q / 100 * len(ordered)) - 1]


def _samples(tests: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    ttfts, gaps = [], []
    for test in tests:
        for trace in test["traces"]:
            stamp = trace["chunk_fields"].index("stamp_ns")
            stamps = [chunk[stamp] for chunk in trace["chunks"]]
            ttfts.append((stamps[0] - trace["request_ns"]) / 1e9)
            gaps += [(b - a) / 1e9 for a, b in itertools.pairwise(stamps)]
    return ttfts, gaps


def _load(path: Path) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(path.read_text())
    return raw


def _strip(test: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in test.items() if k != "worker"}


def test_merge_of_two_real_reports_equals_both_runs_together(
    pytester: pytest.Pytester,
    run: Callable[..., pytest.RunResult],
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytester.makepyfile(test_a=TESTS_A, test_b=TESTS_B)
    run("test_a.py", "--streamguard-json", "a.json").assert_outcomes(passed=2)
    run("test_b.py", "--streamguard-json", "b.json").assert_outcomes(passed=2)
    run("test_a.py", "test_b.py", "--streamguard-json", "both.json").assert_outcomes(passed=4)
    a, b, both = (_load(pytester.path / f"{n}.json") for n in ("a", "b", "both"))

    status = main(["a.json", "b.json", "-o", "merged.html", "--json", "merged.json"])
    assert status == 0
    assert "wrote merged.json (4 tests)" in capsys.readouterr().out
    merged = _load(pytester.path / "merged.json")

    # Every record of both runs, unchanged but for where it ran.
    assert [_strip(t) for t in merged["tests"]] == [_strip(t) for t in a["tests"] + b["tests"]]
    assert [t["worker"] for t in merged["tests"]] == ["a.json"] * 2 + ["b.json"] * 2
    # Same tests, same shape as the run of both files together.
    assert [t["nodeid"] for t in merged["tests"]] == [t["nodeid"] for t in both["tests"]]
    assert set(merged) - {"workers", "missing_workers", "merged_from"} <= set(both)
    assert merged["matrix"][0]["test"] == both["matrix"][0]["test"] == "test_b.py::test_b"
    assert list(merged["matrix"][0]["profiles"]) == list(both["matrix"][0]["profiles"])
    assert merged["matrix"][0]["profiles"] == b["matrix"][0]["profiles"]
    assert set(merged["profiles"]) == {"none", "latency-200"}
    # Pooled percentiles from the union of the raw samples, never from the parts' figures.
    ttfts, gaps = _samples(a["tests"] + b["tests"])
    pooled = merged["pooled"]
    assert pooled["tests"] == 4
    assert pooled["streams"] == 2 + 6 == len(ttfts)
    for q in (50, 95, 99):
        assert pooled[f"ttft_p{q}_s"] == pytest.approx(nearest_rank(ttfts, q), abs=1e-9)
        assert pooled[f"gap_p{q}_s"] == pytest.approx(nearest_rank(gaps, q), abs=1e-9)
    assert pooled["gap_max_s"] == pytest.approx(max(gaps), abs=1e-9)
    assert set(pooled) == set(both["pooled"])
    assert set(merged["workers"]) == {"a.json", "b.json"}
    assert merged["workers"]["b.json"]["tests"] == 2
    assert merged["missing_workers"] == []

    page = (pytester.path / "merged.html").read_text()
    assert "Merged from 2 saved reports:" in page
    assert 'id="matrix-table"' in page
    assert page.count('<td class="test" data-sort=') == 4

    # A report merged again with a third is labelled by both hops.
    assert main(["merged.json", "a.json", "--json", "again.json"]) == 0
    again = _load(pytester.path / "again.json")
    assert [t["worker"] for t in again["tests"]][:3] == [
        "merged.json/a.json",
        "merged.json/a.json",
        "merged.json/b.json",
    ]
