"""Baselines: ``--streamguard-save``, ``--streamguard-compare`` and ``--streamguard-compare-fail``.

The slower second run is the same test under the same matrix profile name, whose file in the
user's profile directory gains a ``latency`` toxic: the node ids match, the figures do not.
A gate that compared nothing (a baseline of other tests, or of none, or figures without samples)
fails, and why the gate failed is shown at every verbosity, last after pytest's counts.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable

import pytest

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
GATE_FAILED = "streamguard: baseline gate FAILED ({}); the reasons are above"
OTHER = """
def test_elsewhere(streamguard):
    assert streamguard.stream(json={"max_new_tokens": 5, "interval_s": 0.01}).completed
"""
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
            "  test_inner.py::test_many[[]net[]]: ttft_p50 * -> * ms (+*.* ms, +*%) REGRESSION "
            "over ttft_p50:0.15s; ttft_p95 *; gap_p95 *; gap_max *",
            "1 regression over --streamguard-compare-fail:",
            "  test_inner.py::test_many[[]net[]]: ttft_p50 * REGRESSION over ttft_p50:0.15s",
        ]
    )
    # One stream is noise: over the bound, shown, never failed on.
    slower.stdout.fnmatch_lines(
        [
            "  test_inner.py::test_single[[]net[]]: ttft_p50 * (over ttft_p50:0.15s, but from 1 "
            "sample: not failed)*"
        ]
    )
    assert "test_single[net]: ttft_p50 * REGRESSION" not in out
    # pytest's counts read "2 passed": the line after them says the gate failed the run.
    _assert_ends_with(slower, ["=* 2 passed in * =*", GATE_FAILED.format("1 regression")])

    _setup(pytester, [])
    within = run("--streamguard-compare", "base.json", "--streamguard-compare-fail", GATE)
    within.assert_outcomes(passed=2)
    assert within.ret == 0
    within.stdout.fnmatch_lines(["compared with baseline base.json (times in ms):"])
    assert "REGRESSION" not in within.stdout.str()
    assert "baseline gate" not in within.stdout.str()


def _assert_ends_with(result: pytest.RunResult, patterns: list[str]) -> None:
    """The last non-empty lines of stdout match ``patterns`` (fnmatch), one for one."""
    lines = [line for line in result.stdout.lines if line.strip()][-len(patterns) :]
    assert len(lines) == len(patterns), result.stdout.str()
    for line, pattern in zip(lines, patterns, strict=True):
        assert fnmatch.fnmatch(line, pattern), f"{line!r} does not match {pattern!r}"


@pytest.mark.parametrize(
    "args",
    [["-q"], ["-qq"], ["-q", "-n", "2"]],
    ids=["q", "qq", "xdist"],
)
def test_a_failed_gate_says_why_at_every_verbosity(
    pytester: pytest.Pytester,
    run: Callable[..., pytest.RunResult],
    app_url: str,
    toxiproxy_url: str,
    args: list[str],
) -> None:
    _setup(pytester, [])
    run("--streamguard-save", "base.json").assert_outcomes(passed=2)
    _setup(pytester, LATENCY)
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-url",
        app_url,
        "-p",
        "no:cacheprovider",
        "--streamguard-compare",
        "base.json",
        "--streamguard-compare-fail",
        GATE,
        *args,
        timeout=120,
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # The regression by name, though -q and -qq leave the streamguard section out.
    result.stdout.fnmatch_lines(
        [
            "1 regression over --streamguard-compare-fail:",
            "  test_inner.py::test_many[[]net[]]: ttft_p50 * REGRESSION over ttft_p50:0.15s",
        ]
    )
    assert "compared with baseline" not in result.stdout.str()
    # -qq prints no counts line; the gate's line is the last either way.
    counts = [] if args == ["-qq"] else ["2 passed in *"]
    _assert_ends_with(result, [*counts, GATE_FAILED.format("1 regression")])


def _save_other_tests_baseline(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    pytester.makepyfile(test_other=OTHER)
    run("--streamguard-save", "base.json").assert_outcomes(passed=1)
    (pytester.path / "test_other.py").unlink()


def _save_empty_baseline(pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]) -> None:
    _setup(pytester, [])
    run("--streamguard-save", "base.json").assert_outcomes(passed=2)
    report = json.loads((pytester.path / "base.json").read_text())
    report["tests"] = {}
    (pytester.path / "base.json").write_text(json.dumps(report))


@pytest.mark.parametrize(
    ("save", "held"),
    [
        (_save_other_tests_baseline, "1 other test: test_other.py::test_elsewhere"),
        (_save_empty_baseline, "no test"),
    ],
    ids=["other-tests", "no-tests"],
)
def test_a_compare_that_matched_no_test_fails_the_gate_and_warns_without_it(
    pytester: pytest.Pytester,
    run: Callable[..., pytest.RunResult],
    save: Callable[[pytest.Pytester, Callable[..., pytest.RunResult]], None],
    held: str,
) -> None:
    save(pytester, run)
    _setup(pytester, [])
    why = (
        "nothing compared: none of this run's 2 tests is in the baseline; the baseline "
        f"base.json holds {held}"
    )

    gated = run("--streamguard-compare", "base.json", "--streamguard-compare-fail", GATE)
    gated.assert_outcomes(passed=2)
    assert gated.ret == pytest.ExitCode.TESTS_FAILED
    gated.stdout.fnmatch_lines([f"FAILED --streamguard-compare-fail: {why}"])
    _assert_ends_with(gated, [GATE_FAILED.format("nothing compared")])

    warned = run("--streamguard-compare", "base.json")
    warned.assert_outcomes(passed=2)
    assert warned.ret == pytest.ExitCode.OK
    warned.stdout.fnmatch_lines([f"warning: {why}"])
    assert "baseline gate" not in warned.stdout.str()


def test_figures_without_samples_fail_the_gate_naming_tests_and_metrics(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    _setup(pytester, [])
    run("--streamguard-save", "base.json").assert_outcomes(passed=2)
    # A baseline saved from a run whose streams brought no chunk (say, all failed before the
    # first token): its tests match, but it has no TTFT and no gap to compare with.
    report = json.loads((pytester.path / "base.json").read_text())
    for test in report["tests"]:
        for trace in test["traces"]:
            trace["chunks"] = []
    (pytester.path / "base.json").write_text(json.dumps(report))

    gated = run("--streamguard-compare", "base.json", "--streamguard-compare-fail", GATE, "-q")
    gated.assert_outcomes(passed=2)
    assert gated.ret == pytest.ExitCode.TESTS_FAILED
    # Each test has 5 tokens per stream: 1 TTFT and 4 gaps per stream in this run.
    gated.stdout.fnmatch_lines(
        [
            "FAILED --streamguard-compare-fail: 4 gated figures with no samples to compare:",
            "  test_inner.py::test_many[[]net[]]: ttft_p50 (0 streams with a first token in the "
            "baseline, 6 in this run); gap_max (0 gaps between chunks in the baseline, 24 in "
            "this run)",
            "  test_inner.py::test_single[[]net[]]: ttft_p50 (0 streams with a first token in "
            "the baseline, 1 in this run); gap_max (0 gaps between chunks in the baseline, 4 in "
            "this run)",
        ]
    )
    _assert_ends_with(gated, [GATE_FAILED.format("4 gated figures with no samples")])

    # Without a gate every figure is looked at, and missing ones are a warning.
    warned = run("--streamguard-compare", "base.json")
    assert warned.ret == pytest.ExitCode.OK
    warned.stdout.fnmatch_lines(["warning: 8 figures with no samples to compare:"])


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
        "-o",
        "streamguard_compare_min_samples=1",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["2 regressions over --streamguard-compare-fail:"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--streamguard-compare-fail", "ttft_p99:5%"],
            "*unknown metric 'ttft_p99'; expected comma-separated metric:bound pairs such as "
            "'ttft_p95:20%,gap_p95:30%,gap_max:0.1s'; metrics: ttft_p50, ttft_p95, gap_p95, "
            "gap_max; a bound is a number >= 0 with a unit: % (relative to the baseline), s or "
            "ms (absolute increase); and headroom:N% (how much a test's headroom may drop)",
        ),
        (["--streamguard-compare-fail", "gap_p95:30"], "*'gap_p95:30' is not a metric:bound pair*"),
        (
            ["--streamguard-compare-fail", "gap_p95:3%,gap_p95:4%"],
            "*metric 'gap_p95' is given more than once*",
        ),
        (["-o", "streamguard_compare_min_samples=0"], "*expected an integer >= 1"),
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
