"""faults.freeze(): the target process the plugin started stops (SIGSTOP to its process group)
for the seconds asked, then goes on; a blocked event loop on any app (issue 27)."""

from __future__ import annotations

import pytest


def test_freeze_after_5_chunks_gives_every_stream_one_gap(
    pytester: pytest.Pytester, app_cmd: str
) -> None:
    pytester.makepyfile(
        """
import pytest

def test_frozen(streamguard):
    record = streamguard.faults.freeze(0.5, after_chunks=5)
    result = streamguard.load(5, json={"max_new_tokens": 40, "interval_s": 0.005})
    assert result.completed == 5
    for trace in result.traces:
        assert 0.45 <= trace.max_gap <= 0.6, (trace.name, trace.max_gap)
        assert sorted(trace.gaps)[-2] < 0.2, (trace.name, sorted(trace.gaps)[-2])
    assert streamguard.faults.judge(streamguard.traces) == []
    assert record.fired and "while the target was stopped" in record.evidence

def test_a_failing_test_leaves_the_target_running(streamguard):
    streamguard.faults.freeze(60)
    raise RuntimeError("boom")

def test_the_target_goes_on_after_it(streamguard):
    trace = streamguard.stream(json={"max_new_tokens": 3, "interval_s": 0.01}, read_timeout=5)
    assert trace.completed

def test_bad_arguments(streamguard):
    with pytest.raises(ValueError, match=r"faults.freeze\\(seconds=0\\): expected a number > 0"):
        streamguard.faults.freeze(0)
    with pytest.raises(ValueError, match=r"faults.freeze\\(after_chunks=0\\)"):
        streamguard.faults.freeze(1, after_chunks=0)
"""
    )
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-target-cmd",
        app_cmd,
        "--streamguard-strict-faults",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: boom*"])


def test_freeze_with_a_target_url_names_target_cmd(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
import pytest

def test_url(streamguard):
    with pytest.raises(ValueError, match="--streamguard-target-url.*--streamguard-target-cmd"):
        streamguard.faults.freeze(0.5)
"""
    )
    run().assert_outcomes(passed=1)
