"""Every fault says whether it took effect (``fired``), and ``--streamguard-strict-faults`` fails
a test whose faults never did.

The judgement is checked two ways: on hand-made traces (each rule and its evidence sentence),
and through real runs of the plugin against the example app and the embedded Toxiproxy, where
each fault either acts on its stream or cannot (a cut longer than the answer, a stall after
more chunks than come, a reader faster than the stream).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from pytest_streamguard.faults.fired import judge
from pytest_streamguard.faults.profiles import Toxic
from pytest_streamguard.stream.trace import Chunk, FaultRecord, StreamTrace

MS = 1_000_000


def trace(
    reads: list[tuple[int, int]], *, completed: bool = True, error_kind: str | None = None
) -> StreamTrace:
    """A stream sent at 0 whose body came in ``reads`` (ms, bytes)."""
    made = StreamTrace(
        name="stream 1 (POST /generate)", method="POST", url="/", format="sse", request_ns=0
    )
    made.reads = [(ms * MS, n) for ms, n in reads]
    made.response_ns = reads[0][0] * MS if reads else None
    made.end_ns = (reads[-1][0] if reads else 0) * MS + MS
    made.completed = completed
    made.error_kind = error_kind
    return made


def record(kind: str, on_ms: int | None = 0, **params: object) -> FaultRecord:
    return FaultRecord(
        kind=kind, params=dict(params), toxics=[], on_ns=None if on_ms is None else on_ms * MS
    )


def test_a_cut_longer_than_every_stream_never_fired() -> None:
    streams = [trace([(10, 1000), (20, 1140)]), trace([(10, 500)])]
    assert judge(record("cut", after_bytes=100_000), streams) == (
        False,
        "every stream it was active on completed (largest 2,140 bytes)",
    )
    fired, evidence = judge(
        record("cut", after_bytes=400), [trace([(10, 300)], completed=False, error_kind="cut")]
    )
    assert fired
    assert evidence == "stream 1 (POST /generate) ended cut after 300 bytes"
    # A stream that failed another way was not cut either.
    fired, evidence = judge(
        record("cut", after_bytes=400), [trace([(10, 300)], completed=False, error_kind="timeout")]
    )
    assert not fired
    assert "no stream it was active on was cut" in evidence
    assert "timeout" in evidence


def test_a_fault_active_on_no_stream_never_fired() -> None:
    for kind in ("latency", "cut", "down", "slow_reader", "stall"):
        assert judge(record(kind, ms=100), []) == (
            False,
            "active on no stream (none was read while it was on)",
        )


def test_latency_fires_on_bytes_that_passed_while_it_was_on() -> None:
    stream = trace([(10, 100), (50, 100)])
    assert judge(record("latency", on_ms=0, ms=100, jitter=0), [stream])[0]
    # Turned on after the last byte of the stream (the stream was still open, so it overlaps).
    late = record("latency", on_ms=55, ms=100, jitter=0)
    assert judge(late, [stream]) == (False, "no response byte passed while it was on")
    assert judge(record("latency", ms=0, jitter=0), [stream]) == (
        False,
        "a 0 ms latency delays nothing",
    )
    upstream = record("latency", on_ms=0, ms=100, jitter=0, stream="upstream")
    assert judge(upstream, [stream]) == (True, "1 request was sent while it was on")


def test_slow_reader_fires_only_when_the_reader_had_to_wait() -> None:
    slow = record("slow_reader", bytes_per_second=2000)
    assert judge(slow, [trace([(50, 1000), (1000, 1000)])], waited=0.95) == (
        True,
        "the reader waited 0.950 s in all to keep to 2,000 B/s",
    )
    # 600 bytes over 0.6 s: never ahead of 2,000 B/s, so the client never waited.
    fired, evidence = judge(slow, [trace([(100, 100), (300, 200), (600, 300)])])
    assert not fired
    assert evidence == (
        "no stream came faster than 2,000 B/s, so the reader never waited "
        "(fastest: 600 bytes in 0.601 s)"
    )


def test_stall_and_chunk_cut_fire_on_the_streams_that_reached_their_chunk() -> None:
    short = trace([(10, 100)])
    short.chunks = []
    assert judge(record("stall", on_ms=None, after_chunks=3, seconds=1.0), [short]) == (
        False,
        "no stream reached chunk 3 (longest: 0 chunks)",
    )
    cut = record("cut", after_chunks=3)
    fired, evidence = judge(cut, [short], triggered=[short])
    assert not fired
    assert evidence.startswith("1 stream reached chunk 3 but ended before the cut took effect")
    ended = trace([(10, 100)], completed=False, error_kind="cut")
    assert judge(cut, [ended], triggered=[ended])[0]


def chunked(
    stamps_ms: list[int], *, completed: bool = True, error_kind: str | None = None
) -> StreamTrace:
    """A stream whose data events came at ``stamps_ms``."""
    made = trace([(ms, 10) for ms in stamps_ms], completed=completed, error_kind=error_kind)
    made.chunks = [
        Chunk(index=i, stamp_ns=ms * MS, first_byte_ns=ms * MS, nbytes=10, text="t")
        for i, ms in enumerate(stamps_ms)
    ]
    return made


def test_a_stall_the_proxy_applied_fires_on_the_wait_after_chunk_n() -> None:
    made = record("stall", on_ms=30, after_chunks=3, seconds=1.0)
    held = chunked([10, 20, 30, 1035, 1050])
    assert judge(made, [held], triggered=[held]) == (
        True,
        "1 of 1 stream that reached chunk 3 waited 1.005 s or more after it",
    )
    short = chunked([10, 20, 30, 500, 510])
    assert judge(made, [short], triggered=[short]) == (
        False,
        "1 stream reached chunk 3, but none waited 0.900 s after it (longest wait: 0.470 s)",
    )


def test_stall_fires_on_any_stream_it_held_or_ended_after_chunk_n() -> None:
    made = record("stall", on_ms=30, after_chunks=3, seconds=1.0)
    # Ended by the hold: a read timeout 0.95 s after chunk 3, no event after it.
    timed_out = chunked([10, 20, 30], completed=False, error_kind="timeout")
    timed_out.end_ns = 980 * MS
    assert judge(made, [timed_out], triggered=[timed_out]) == (
        True,
        "1 of 1 stream that reached chunk 3 waited 0.950 s or more after it",
    )
    # Of two streams that reached chunk 3, one was held: the fault fired, and says how many.
    fast = chunked([10, 11, 12, 13])
    held = chunked([10, 20, 30, 1100])
    assert judge(made, [fast, held], triggered=[fast, held]) == (
        True,
        "1 of 2 streams that reached chunk 3 waited 1.070 s or more after it",
    )
    # Chunk 3 was the last: a clean end right after it is no hold.
    assert judge(made, [fast], triggered=[fast]) == (
        False,
        "1 stream reached chunk 3, but none waited 0.900 s after it (longest wait: 0.001 s)",
    )


def test_a_profile_fires_by_its_toxics() -> None:
    profile = record("profile", name="big-cut")
    toxics = [Toxic("limit_data", {"bytes": 100_000})]
    assert judge(profile, [trace([(10, 2140)])], toxics=toxics) == (
        False,
        "limit_data(bytes=100000): every stream it was active on completed (largest 2,140 bytes)",
    )
    toxics.append(Toxic("latency", {"latency": 30, "jitter": 0}))
    fired, evidence = judge(profile, [trace([(10, 2140)])], toxics=toxics)
    assert fired
    assert evidence.startswith("latency: 2,140 response bytes of 1 stream passed")


FIRED = """
import threading

import pytest

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
    original = streamguard.faults.on_chunk

    def on_chunk(trace):
        original(trace)
        if len(trace.chunks) == 3:
            third.set()

    streamguard.faults.on_chunk = on_chunk
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
    result = run("--streamguard-profiles", str(profiles), "--streamguard-json", "report.json")
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
    result = run("--streamguard-profiles", str(profiles), "--streamguard-strict-faults")
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
