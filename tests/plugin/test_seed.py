"""--streamguard-seed: the same seed gives the same random draws (the embedded Toxiproxy's latency
jitter here), another seed other ones; the seed is in the header and the JSON report."""

from __future__ import annotations

import json

import pytest

JITTER_TEST = """
import json

def test_jitter(streamguard):
    streamguard.faults.latency(100, jitter=90)
    trace = streamguard.stream("/generate", json={"max_new_tokens": 12, "interval_s": 0.15})
    assert trace.completed, trace.error
    with open("gaps.json", "w") as out:
        json.dump(trace.gaps, out)
"""


def run_with_seed(
    pytester: pytest.Pytester, app_url: str, seed: int
) -> tuple[list[float], pytest.RunResult]:
    # No --streamguard-toxiproxy: each run starts its own embedded server, which the seed
    # reaches through its -seed flag.
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-target-url",
        app_url,
        f"--streamguard-seed={seed}",
        "--streamguard-json",
        "report.json",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    gaps = json.loads(pytester.path.joinpath("gaps.json").read_text())
    assert isinstance(gaps, list)
    return gaps, result


def test_the_same_seed_gives_the_same_jitter_and_another_seed_other_jitter(
    pytester: pytest.Pytester, app_url: str
) -> None:
    pytester.makepyfile(test_jitter=JITTER_TEST)
    first, result = run_with_seed(pytester, app_url, 7)
    again, _ = run_with_seed(pytester, app_url, 7)
    other, _ = run_with_seed(pytester, app_url, 8)
    assert len(first) == len(again) == len(other) == 11
    # Tokens leave the app every 150 ms; each is delayed 100 ms +- 90 ms, so a gap is 150 ms
    # plus the difference of two draws: the same draws give the same gaps within a few ms of
    # scheduling, other draws gaps tens of ms apart. On a machine kept busy a gap can take a
    # scheduling delay of its own (20.4 ms once with a load average of 4 on 2 cores, two gaps
    # of 11 with 25 and 30 ms at a load average of 10), so the same seed's bound holds for
    # most gaps, not all.
    same = [abs(a - b) < 0.02 for a, b in zip(first, again, strict=True)]
    assert sum(same) >= 8, (first, again)
    assert max(abs(a - b) for a, b in zip(first, other, strict=True)) > 0.04, (first, other)
    assert json.loads(pytester.path.joinpath("report.json").read_text())["seed"] == 8
    result.stdout.fnmatch_lines(["streamguard: *, seed=7"])


def test_a_bad_seed_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("--streamguard", "--streamguard-seed", "-3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*'-3' from --streamguard-seed is not a valid streamguard_seed: expected a whole*"]
    )
