"""Every fault says whether it took effect (``fired``), and ``--streamguard-strict-faults`` fails
a test whose faults never did.

The judgement is checked two ways: on hand-made traces (each rule and its evidence sentence,
tests/faults/test_fired.py), and here through real runs of the plugin against the example app
and the embedded Toxiproxy, where each fault either acts on its stream or cannot (a cut longer
than the answer, a stall after more chunks than come, a reader faster than the stream).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

FIRED = """
import threading

import pytest

from pytest_streamguard.faults.inject import log_of

# Events 0.2 s apart: a chunk-triggered cut's toxic (one API call) is on long before the next.
SIX = {"max_new_tokens": 6, "interval_s": 0.2}


def test_cut_longer_than_the_answer(streamguard):
    streamguard.faults.cut(after_bytes=100_000)
    assert streamguard.stream(json=SIX).completed


def test_stall_after_more_chunks_than_come(streamguard):
    streamguard.faults.stall(after_chunks=50, seconds=1.0)
    assert streamguard.stream(json=SIX).completed


def test_slow_reader_faster_than_the_stream(streamguard):
    streamguard.faults.slow_reader(1_000_000)
    assert streamguard.stream(json={"max_new_tokens": 6, "interval_s": 0.05}).completed


def test_fault_after_the_stream(streamguard):
    assert streamguard.stream(json=SIX).completed
    streamguard.faults.latency(100)


def test_faults_that_act(streamguard):
    streamguard.faults.latency(50)
    # Half the rate the app streams at even when slow: a plain (one-process) run once read
    # 3,404 bytes at 1,767 B/s from the in-process app, under a 2,000 B/s reader that then
    # never had to wait.
    streamguard.faults.slow_reader(1000)
    trace = streamguard.stream(json={"max_new_tokens": 4, "interval_s": 0, "pad": 300})
    assert trace.completed
    streamguard.faults.clear()
    streamguard.faults.cut(after_chunks=3)
    trace = streamguard.stream(json=SIX)
    assert trace.error_kind == "cut", trace.error
    # The cut's toxic went off with its stream: the next stream is cut after its own 3rd chunk.
    trace = streamguard.stream(json=SIX)
    assert trace.error_kind == "cut", trace.error
    assert 3 <= len(trace.chunks) < 6


def test_down_mid_stream_is_on_its_trace(streamguard):
    third = threading.Event()
    log = log_of(streamguard.faults)  # the plugin's side, which hears each chunk
    original = log.on_chunk

    def on_chunk(trace):
        original(trace)
        if len(trace.chunks) == 3:
            third.set()

    log.on_chunk = on_chunk
    thread = threading.Thread(
        target=lambda: third.wait(30) and streamguard.faults.down(), daemon=True
    )
    thread.start()
    trace = streamguard.stream(json={"max_new_tokens": 100, "interval_s": 0.05})
    thread.join(30)
    assert not trace.completed
    assert [f.kind for f in trace.faults] == ["down"]
"""

NEVER = {
    "test_cut_longer_than_the_answer": "cut(after_bytes=100000): every stream it was active on "
    "completed (largest * bytes)",
    "test_stall_after_more_chunks_than_come": "stall(after_chunks=50, seconds=1.0): no stream "
    "reached chunk 50 (longest: 6 chunks)",
    "test_slow_reader_faster_than_the_stream": "slow_reader(bytes_per_second=1000000): no stream "
    "came faster than 1,000,000 B/s, so the reader never waited (fastest: *",
    "test_fault_after_the_stream": "latency(ms=100, jitter=0, stream='downstream'): active on no "
    "stream (none was read while it was on)",
}


def test_json_and_summary_say_which_faults_fired(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    pytester.makepyfile(test_inner=FIRED)
    result = run("--streamguard-json", "report.json")
    result.assert_outcomes(passed=6)
    report = json.loads((pytester.path / "report.json").read_text())
    faults = {t["nodeid"].split("::")[1]: t["faults"] for t in report["tests"]}
    for name in NEVER:
        (fault,) = faults[name]
        assert fault["fired"] is False, (name, fault)
    acted = faults["test_faults_that_act"]
    assert [f["kind"] for f in acted] == ["latency", "slow_reader", "cut"]
    assert all(f["fired"] is True for f in acted), acted
    (down,) = faults["test_down_mid_stream_is_on_its_trace"]
    assert down["fired"] is True, down
    # The trace-level copies carry the verdict too.
    trace_faults = [f for t in report["tests"] for tr in t["traces"] for f in tr["faults"]]
    assert trace_faults
    assert all(isinstance(f["fired"], bool) for f in trace_faults)
    result.stdout.fnmatch_lines(
        [
            "*test_inner.py::test_cut_longer_than_the_answer*cut(after_bytes=100000) (never fired)",
            "warning: 4 faults never fired, so their tests proved nothing about them*",
            *(f"  test_inner.py::{name}: {line}" for name, line in NEVER.items()),
        ]
    )


def test_strict_faults_fails_the_tests_whose_faults_never_fired(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    pytester.makepyfile(test_inner=FIRED)
    result = run("--streamguard-strict-faults", "-q")
    result.assert_outcomes(passed=2, failed=4)
    for name in NEVER:
        result.stdout.fnmatch_lines([f"FAILED test_inner.py::{name} - *"])
    for name, line in NEVER.items():
        # Each failure names the fault and why, under the headline.
        result.stdout.fnmatch_lines(
            [
                f"*_ {name} _*",
                "E   *FaultsNotFired: 1 fault never fired, so the test proved nothing about "
                "it (--streamguard-strict-faults):",
                f"      {line}",
            ]
        )
    result.stdout.fnmatch_lines(
        [
            "streamguard: 6 tests read streams, 0 violated a deadline, 4 failed on faults "
            "that never fired",
            "4 faults never fired (failed: --streamguard-strict-faults):",
        ]
    )
    # The ini key does the same.
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "streamguard_strict_faults = true\n"
    )
    result = run("-q", "-k", "longer_than_the_answer or faults_that_act")
    result.assert_outcomes(passed=1, failed=1)


def test_cut_mid_stream_cuts_a_six_event_stream_and_a_byte_profile_never_fires(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    profiles = pytester.mkdir("netprofiles")
    (profiles / "cut-100k.json").write_text(
        json.dumps([{"type": "limit_data", "attributes": {"bytes": 100_000}}])
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.streamguard_matrix("cut-mid-stream", "cut-100k")
        def test_six(streamguard):
            # Events 0.2 s apart: the cut's toxic is on long before the 4th (API calls take ms).
            streamguard.stream(json={"max_new_tokens": 6, "interval_s": 0.2})
        """
    )
    result = run("-o", f"streamguard_profiles={profiles}", "--streamguard-json", "report.json")
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "report.json").read_text())
    by_profile = {t["profile"]: t for t in report["tests"]}
    (cut,) = by_profile["cut-mid-stream"]["traces"]
    assert cut["error_kind"] == "cut", cut["error"]
    assert 3 <= len(cut["chunks"]) < 6
    assert [f["fired"] for f in by_profile["cut-mid-stream"]["faults"]] == [True]
    (whole,) = by_profile["cut-100k"]["traces"]
    assert whole["completed"]
    (never,) = by_profile["cut-100k"]["faults"]
    assert never["fired"] is False
    assert never["evidence"].startswith(
        "limit_data(bytes=100000): every stream it was active on completed"
    )
    result.stdout.fnmatch_lines(
        ["  test_*.py::test_six[[]cut-100k[]]: profile(name='cut-100k'): limit_data*"]
    )
    result = run("-o", f"streamguard_profiles={profiles}", "--streamguard-strict-faults")
    result.assert_outcomes(passed=1, failed=1)


def test_bad_cut_arguments_say_what_is_accepted(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize(("call", "message"), [
            ("cut()", "expected exactly one of after_bytes"),
            ("cut(100, after_chunks=3)", "expected exactly one of after_bytes"),
            ("cut(after_chunks=0)", "faults.cut(after_chunks=0): expected an integer >= 1"),
            ("slow_reader(20_000_000)", "at most 10,000,000 (10 MB/s)"),
        ])
        def test_bad(streamguard, call, message):
            with pytest.raises(ValueError, match=message.replace("(", "[(]").replace(")", "[)]")):
                eval("streamguard.faults." + call)
        """
    )
    run().assert_outcomes(passed=4)
