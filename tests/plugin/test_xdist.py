"""pytest-xdist: each worker measures with its own proxy, the controller merges and reports once.

These run pytest in a subprocess (``runpytest_subprocess``) with ``-n 2``: xdist starts real
worker processes, and a crashing worker must not take the outer session down.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any

import pytest

pytest.importorskip("xdist")

SUITE = """
import pytest

@pytest.mark.token_deadline(ttft=2.0, chunk=0.5)
@pytest.mark.parametrize("tokens", [3, 4, 5, 6, 7, 8])
def test_stream(streamguard, tokens):
    trace = streamguard.stream(json={"max_new_tokens": tokens, "interval_s": 0.01 * tokens})
    assert trace.completed

def test_load(streamguard):
    streamguard.load(5, json={"max_new_tokens": 4, "interval_s": 0.03})
"""


def nearest_rank(samples: list[float], q: float) -> float:
    """The nearest-rank percentile, computed here independently of the plugin."""
    ordered = sorted(samples)
    return ordered[math.ceil(q / 100 * len(ordered)) - 1]


def gaps_of(test: dict[str, Any]) -> list[float]:
    """Every gap of a JSON test record, recomputed from the raw chunk stamps (each chunk a row
    under the trace's chunk_fields)."""
    gaps = []
    for trace in test["traces"]:
        stamp = trace["chunk_fields"].index("stamp_ns")
        stamps = [chunk[stamp] for chunk in trace["chunks"]]
        gaps += [(b - a) / 1e9 for a, b in itertools.pairwise(stamps)]
    return gaps


def test_two_workers_merge_into_one_summary_and_json(
    pytester: pytest.Pytester, app_cmd: str
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--streamguard",
        "--streamguard-target-cmd",
        app_cmd,
        "--streamguard-json",
        "report.json",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=7)
    out = result.stdout.str()
    # One summary and one JSON, written by the controller.
    assert out.count("= streamguard =") == 1, out
    assert sorted(p.name for p in pytester.path.glob("*.json")) == ["report.json"]
    report = json.loads((pytester.path / "report.json").read_text())
    tests = {t["nodeid"]: t for t in report["tests"]}
    assert len(tests) == 7
    assert {t["worker"] for t in report["tests"]} == {"gw0", "gw1"}
    assert set(report["workers"]) == {"gw0", "gw1"}
    assert report["missing_workers"] == []
    # Each worker started its own target (a --streamguard-target-cmd) and its own proxy server.
    urls = {w["target_url"] for w in report["workers"].values()}
    assert len(urls) == 2, report["workers"]
    assert len({w["toxiproxy"] for w in report["workers"].values()}) == 2
    assert sum(w["tests"] for w in report["workers"].values()) == 7
    result.stdout.fnmatch_lines(["merged 7 test records from 2 workers", "  gw0: * test*"])

    verdicts = {nodeid.split("::")[1].split("[")[0]: t["verdict"] for nodeid, t in tests.items()}
    assert verdicts == {"test_stream": "pass", "test_load": "unchecked"}
    # Every test's row, with its figures, whichever worker ran it.
    for nodeid, test in tests.items():
        gaps = gaps_of(test)
        p50, p95 = nearest_rank(gaps, 50), nearest_rank(gaps, 95)
        chunks = sum(len(t["chunks"]) for t in test["traces"])
        row = (
            rf"{re.escape(nodeid)}\s+[\d.]+\s+{p50 * 1e3:.1f}\s+{p95 * 1e3:.1f}\s+"
            rf"{max(gaps) * 1e3:.1f}\s+{chunks}\s+{test['verdict']}\s+-"
        )
        result.stdout.re_match_lines([row])
    # Pooled percentiles come from the union of both workers' raw samples.
    union = [g for test in tests.values() for g in gaps_of(test)]
    assert len(union) == sum(range(2, 8)) + 5 * 3
    for q in (50, 95, 99):
        assert report["pooled"][f"gap_p{q}_s"] == pytest.approx(nearest_rank(union, q), abs=1e-9)
    result.stdout.re_match_lines(
        [
            rf"all 7 tests \(11 streams\)\s+[\d.]+\s+{nearest_rank(union, 50) * 1e3:.1f}\s+"
            rf"{nearest_rank(union, 95) * 1e3:.1f}\s+{max(union) * 1e3:.1f}\s+"
        ]
    )


def test_shared_target_url_and_toxiproxy(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--streamguard",
        "--streamguard-target-url",
        app_url,
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-json",
        "report.json",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=7)
    report = json.loads((pytester.path / "report.json").read_text())
    # Both workers used the one target and server, each through a proxy of its own.
    assert {w["target_url"] for w in report["workers"].values()} == {app_url}
    assert {w["toxiproxy"] for w in report["workers"].values()} == {f"external {toxiproxy_url}"}
    proxies = {trace["url"].rsplit("/", 1)[0] for t in report["tests"] for trace in t["traces"]}
    assert len(proxies) == 2, proxies


def test_crashed_worker_is_named_as_missing(pytester: pytest.Pytester, app_url: str) -> None:
    pytester.makepyfile(
        test_suite=SUITE
        + """
def test_crash(streamguard):
    streamguard.stream(json={"max_new_tokens": 2})
    import os
    os._exit(1)
"""
    )
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--streamguard",
        "--streamguard-target-url",
        app_url,
        "--streamguard-json",
        "report.json",
        "-p",
        "no:cacheprovider",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["  MISSING gw*: crashed: *; its tests' streams are not in this report"]
    )
    report = json.loads((pytester.path / "report.json").read_text())
    assert len(report["missing_workers"]) == 1
    missing = report["missing_workers"][0]
    assert missing["worker"].startswith("gw")
    assert missing["reason"].startswith("crashed")
    assert missing["worker"] not in report["workers"]
    assert "test_suite.py::test_crash" not in {t["nodeid"] for t in report["tests"]}
