"""faults.restart(): the target process the plugin started is killed (SIGKILL to its process
group, a crash) and started again with the same command on the same port; streams in flight
are cut, later ones succeed (issue 27)."""

from __future__ import annotations

import pytest

RESTART = """
def test_restart_after_3_chunks(streamguard):
    before = streamguard.target.pid
    record = streamguard.faults.restart(after_chunks=3)
    result = streamguard.load(3, json={"max_new_tokens": 200, "interval_s": 0.01})
    assert result.completed == 0
    for trace in result.traces:
        assert len(trace.chunks) < 200, (trace.name, len(trace.chunks))
        assert trace.error_kind in ("cut", "reset", "network", "truncated"), trace.error_kind
    # Opened while the target starts again: it waits until the target is ready.
    later = streamguard.stream(json={"max_new_tokens": 5, "interval_s": 0.01})
    assert later.completed and len(later.chunks) == 5
    assert streamguard.target.pid != before
    assert record.applied_by == "client" and record.off_ns > record.on_ns
    assert streamguard.faults.judge(streamguard.traces) == []
    assert record.fired and "ended" in record.evidence, record.evidence

def test_restart_now(streamguard):
    before = streamguard.target.pid
    streamguard.faults.restart()
    assert streamguard.target.pid != before
    trace = streamguard.stream(json={"max_new_tokens": 3, "interval_s": 0.01})
    assert trace.completed

def test_the_next_test_finds_it_running(streamguard):
    trace = streamguard.stream(json={"max_new_tokens": 3, "interval_s": 0.01})
    assert trace.completed

def test_a_restart_no_stream_reached_never_fired(streamguard):
    record = streamguard.faults.restart(after_chunks=50)
    streamguard.stream(json={"max_new_tokens": 3, "interval_s": 0.01})
    assert streamguard.faults.judge(streamguard.traces) == [record]
    assert record.evidence == (
        "the target was never killed: no stream reached chunk 50 (longest: 3 chunks)"
    )

def test_bad_arguments(streamguard):
    import pytest
    with pytest.raises(ValueError, match=r"faults.restart\\(after_chunks=0\\)"):
        streamguard.faults.restart(after_chunks=0)
    streamguard.faults.restart(after_chunks=2)
    with pytest.raises(ValueError, match="restart.after_chunks=2. is set off by this process"):
        streamguard.load(2, json={"max_new_tokens": 3}, processes=2)
"""


def test_restart_cuts_the_streams_in_flight_and_later_ones_succeed(
    pytester: pytest.Pytester, app_cmd: str
) -> None:
    pytester.makepyfile(RESTART)
    result = pytester.runpytest_subprocess(
        "--streamguard", "--streamguard-target-cmd", app_cmd, "-p", "no:cacheprovider", "-v"
    )
    result.assert_outcomes(passed=5)


def test_restart_with_a_target_url_names_target_cmd(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
import pytest

def test_url(streamguard):
    with pytest.raises(ValueError, match="--streamguard-target-url.*--streamguard-target-cmd"):
        streamguard.faults.restart()
    assert streamguard.faults.records == []
"""
    )
    run().assert_outcomes(passed=1)
