"""Baselines: ``--streamguard-save``, ``--streamguard-compare`` and ``--streamguard-compare-fail``.

The slower second run is the same test under the same matrix profile name, whose file in the
user's profile directory gains a ``latency`` toxic: the node ids match, the figures do not.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from pytest_streamguard.bounds import Bound, parse_bounds

INNER = """
import pytest

@pytest.mark.streamguard_matrix("net")
def test_many(streamguard):
    for _ in range(6):
        assert streamguard.stream(json={"max_new_tokens": 5, "interval_s": 0.01}).completed

@pytest.mark.streamguard_matrix("net")
def test_single(streamguard):
    assert streamguard.stream(json={"max_new_tokens": 5, "interval_s": 0.01}).completed
"""
GATE = "ttft_p50:0.15s,gap_max:0.5s"
LATENCY = [{"type": "latency", "attributes": {"latency": 300, "jitter": 0}}]


def _setup(pytester: pytest.Pytester, toxics: list[dict[str, object]]) -> None:
    profiles = pytester.path / "profiles"
    profiles.mkdir(exist_ok=True)
    (profiles / "net.json").write_text(json.dumps(toxics))
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\nstreamguard_profiles = profiles\n"
    )
    pytester.makepyfile(test_inner=INNER)


def test_slower_run_fails_the_compare_naming_the_regression_and_a_run_within_bounds_passes(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    _setup(pytester, [])
    saved = run("--streamguard-save", "base.json")
    saved.assert_outcomes(passed=2)
    assert saved.ret == 0
    saved.stdout.fnmatch_lines(["baseline saved: base.json"])
    base = json.loads((pytester.path / "base.json").read_text())
    assert {t["nodeid"] for t in base["tests"]} == {
        "test_inner.py::test_many[net]",
        "test_inner.py::test_single[net]",
    }

    _setup(pytester, LATENCY)
    slower = run("--streamguard-compare", "base.json", "--streamguard-compare-fail", GATE)
    # Every test passed; the run fails on the regression alone.
    slower.assert_outcomes(passed=2)
    assert slower.ret == pytest.ExitCode.TESTS_FAILED
    out = slower.stdout.str()
    slower.stdout.fnmatch_lines(
        [
            "compared with baseline base.json (times in ms):",
            "  test_inner.py::test_many[[]net[]]: ttft_p50 * -> * ms (+3*.* ms, *) REGRESSION over "
            "ttft_p50:0.15s; ttft_p95 *; gap_p95 *; gap_max *",
            "1 regression(s) over --streamguard-compare-fail:",
            "  test_inner.py::test_many[[]net[]]: ttft_p50 * REGRESSION over ttft_p50:0.15s",
        ]
    )
    # One stream is noise: over the bound, shown, never failed on.
    slower.stdout.fnmatch_lines(
        [
            "  test_inner.py::test_single[[]net[]]: ttft_p50 * (over ttft_p50:0.15s, but from 1 "
            "sample(s): not failed)*"
        ]
    )
    assert "test_single[net]: ttft_p50 * REGRESSION" not in out

    _setup(pytester, [])
    within = run("--streamguard-compare", "base.json", "--streamguard-compare-fail", GATE)
    within.assert_outcomes(passed=2)
    assert within.ret == 0
    within.stdout.fnmatch_lines(["compared with baseline base.json (times in ms):"])
    assert "REGRESSION" not in within.stdout.str()


def test_min_samples_option_makes_a_single_stream_count(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    _setup(pytester, [])
    run("--streamguard-save", "base.json").assert_outcomes(passed=2)
    _setup(pytester, LATENCY)
    result = run(
        "--streamguard-compare",
        "base.json",
        "--streamguard-compare-fail",
        "ttft_p50:0.15s",
        "--streamguard-compare-min-samples",
        "1",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["2 regression(s) over --streamguard-compare-fail:"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--streamguard-compare-fail", "ttft_p99:5%"],
            "*unknown metric 'ttft_p99'; expected comma-separated metric:bound pairs such as "
            "'ttft_p95:20%,gap_p95:30%,gap_max:0.1s'; metrics: ttft_p50, ttft_p95, gap_p95, "
            "gap_max; a bound is a number >= 0 with a unit: % (relative to the baseline), s or "
            "ms (absolute increase)",
        ),
        (["--streamguard-compare-fail", "gap_p95:30"], "*'gap_p95:30' is not a metric:bound pair*"),
        (
            ["--streamguard-compare-fail", "gap_p95:3%,gap_p95:4%"],
            "*metric 'gap_p95' is given more than once*",
        ),
        (["--streamguard-compare-min-samples", "0"], "*expected an integer >= 1"),
    ],
)
def test_bad_compare_fail_is_a_usage_error(
    pytester: pytest.Pytester,
    run: Callable[..., pytest.RunResult],
    args: list[str],
    message: str,
) -> None:
    (pytester.path / "base.json").write_text("{}")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = run("--streamguard-compare", "base.json", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_compare_fail_needs_a_baseline_and_the_baseline_must_exist(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = run("--streamguard-compare-fail", "gap_max:1s")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*streamguard_compare_fail (--streamguard-compare-fail) needs*"])
    result = run("--streamguard-compare", "missing.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'missing.json' from --streamguard-compare * no such file*"])
    (pytester.path / "bad.json").write_text("[1]")
    result = run("--streamguard-compare", "bad.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--streamguard-compare bad.json: cannot read the baseline*"])


def test_bounds_parse_units_and_judge_changes() -> None:
    assert parse_bounds("ttft_p95:20%, gap_max:100ms,gap_p95:0.5s") == (
        Bound("ttft_p95", 20.0, True),
        Bound("gap_max", 0.1, False),
        Bound("gap_p95", 0.5, False),
    )
    assert Bound("ttft_p95", 20.0, True).exceeded(0.100, 0.121)
    assert not Bound("ttft_p95", 20.0, True).exceeded(0.100, 0.119)
    assert Bound("gap_max", 0.1, False).exceeded(0.05, 0.151)
    assert not Bound("gap_max", 0.1, False).exceeded(0.05, 0.149)
    # Getting better is never a regression.
    assert not Bound("ttft_p50", 0.0, True).exceeded(0.2, 0.1)
