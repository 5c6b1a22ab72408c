"""Traces, nearest-rank percentiles, deadline verdicts and their messages (pure logic)."""

from __future__ import annotations

import pytest

from pytest_streamguard import Chunk, DeadlineViolation, FaultRecord, StreamTrace, percentile
from pytest_streamguard.verdict.deadlines import Deadline, check_trace

MS = 1_000_000


def make_trace(
    stamps_ms: list[float],
    *,
    completed: bool = True,
    error: str | None = None,
    error_kind: str | None = None,
) -> StreamTrace:
    trace = StreamTrace(
        name="stream 1 (POST /generate)",
        method="POST",
        url="http://x/generate",
        format="sse",
        request_ns=1_000 * MS,
    )
    for i, ms in enumerate(stamps_ms):
        stamp = trace.request_ns + int(ms * MS)
        trace.chunks.append(
            Chunk(index=i, stamp_ns=stamp, first_byte_ns=stamp, nbytes=10, text=f"t{i} ")
        )
        trace.reads.append((stamp, 10))
    last = stamps_ms[-1] if stamps_ms else 0
    trace.end_ns = trace.request_ns + int((last + 5) * MS)
    trace.completed = completed
    trace.error = error
    trace.error_kind = error_kind
    return trace


def test_percentile_is_nearest_rank() -> None:
    samples = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(samples, 50) == 3.0
    assert percentile(samples, 100) == 5.0
    assert percentile(samples, 1) == 1.0
    assert percentile(samples, 80) == 4.0
    assert percentile(samples, 81) == 5.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="0 < q <= 100"):
        percentile(samples, 0)
    # The rank is exact: p99.9 of 1,000 samples is the 999th (in floats 99.9 / 100 * 1000 is
    # 999.0000000000001, which rounded up to the 1,000th).
    thousand = [float(i) for i in range(1, 1001)]
    assert percentile(thousand, 99.9) == 999.0
    assert percentile(thousand * 10, 99.9) == 999.0
    assert percentile(thousand, 99) == 990.0


def test_trace_metrics() -> None:
    trace = make_trace([100, 150, 400, 450])
    assert trace.ttft == pytest.approx(0.1)
    assert trace.gaps == pytest.approx([0.05, 0.25, 0.05])
    assert trace.max_gap == pytest.approx(0.25)
    assert trace.total == pytest.approx(0.455)
    assert trace.text == "t0 t1 t2 t3 "
    assert trace.percentile(50) == pytest.approx(0.05)
    assert trace.nbytes == 40


def test_trace_round_trips_through_builtin_dicts() -> None:
    trace = make_trace([10, 20, 35])
    trace.faults.append(
        FaultRecord(kind="latency", params={"ms": 100}, toxics=["x"], on_ns=5, off_ns=None)
    )
    raw = trace.to_dict()
    assert raw["stats"]["chunks"] == 3
    back = StreamTrace.from_dict(raw)
    assert back.to_dict() == raw


def test_passing_trace_has_no_violation() -> None:
    trace = make_trace([100, 150, 200])
    assert check_trace(trace, Deadline(ttft=0.5, chunk=0.2, total=1.0)) == []
    trace.assert_deadline(ttft=0.5, chunk=0.2)


def test_gap_violation_names_stream_chunk_value_deadline_and_faults() -> None:
    trace = make_trace([100, 150, 1350, 1400])
    trace.faults.append(
        FaultRecord(
            kind="stall",
            params={"after_chunks": 2, "seconds": 1.0},
            toxics=["s"],
            on_ns=trace.request_ns + 160 * MS,
            off_ns=trace.request_ns + 1340 * MS,
        )
    )
    with pytest.raises(DeadlineViolation) as info:
        trace.assert_deadline(chunk=0.2)
    message = str(info.value)
    assert isinstance(info.value, AssertionError)
    assert "stream 1 (POST /generate)" in message
    assert "gap before chunk 2 = 1.200 s > chunk deadline 0.200 s (1 of 3 gaps over)" in message
    assert "stall(after_chunks=2, seconds=1.0)" in message
    assert "timeline of stream 1" in message
    assert "chunk 2 (10 B) +1200.0  <-- over 200.0 ms" in message
    assert "fault on: stall" in message


def test_ttft_and_total_violations() -> None:
    trace = make_trace([700, 750])
    found = {v.bound: v for v in check_trace(trace, Deadline(ttft=0.5, total=0.6))}
    assert found["ttft"].measured == pytest.approx(0.7)
    assert found["ttft"].limit == 0.5
    assert found["total"].measured == pytest.approx(0.755)


def test_percentile_bound_tolerates_single_outlier() -> None:
    stamps = [100 + 10 * i for i in range(40)]
    stamps[20:] = [s + 500 for s in stamps[20:]]
    trace = make_trace(stamps)
    assert check_trace(trace, Deadline(chunk=0.05, percentile=95)) == []
    (violation,) = check_trace(trace, Deadline(chunk=0.05, percentile=100))
    assert violation.detail.startswith("p100 gap 0.510 s > chunk deadline 0.050 s")


def test_incomplete_stream_is_always_a_violation() -> None:
    trace = make_trace(
        [100, 150], completed=False, error="RemoteProtocolError: peer closed", error_kind="cut"
    )
    (violation,) = check_trace(trace, Deadline())
    assert violation.bound == "completed"
    assert (
        "did not complete (cut: RemoteProtocolError: peer closed) after 2 chunks"
        in violation.detail
    )


def test_no_data_event_breaks_ttft_only_when_it_waited_past_it() -> None:
    # Waiting 0.8 s for a first token that never came breaks both.
    waited = make_trace([], completed=False, error="timeout", error_kind="timeout")
    waited.end_ns = waited.request_ns + 800 * MS
    found = check_trace(waited, Deadline(ttft=0.5))
    assert {v.bound for v in found} == {"completed", "ttft"}
    assert "no data event arrived in 0.800 s (ttft deadline 0.500 s)" in found[1].detail
    # An empty answer that ended after 5 ms is one violation: it did not complete.
    quick = make_trace([], completed=False, error="ended before any token", error_kind="empty")
    assert [v.bound for v in check_trace(quick, Deadline(ttft=0.5))] == ["completed"]


def test_allowed_empty_answer_is_timed_to_its_end_against_ttft() -> None:
    quick = make_trace([])  # completed without a token: allow_empty=True let it through
    assert quick.total == pytest.approx(0.005)
    assert check_trace(quick, Deadline(ttft=0.5, chunk=0.2)) == []
    late = make_trace([])
    late.end_ns = late.request_ns + 900 * MS
    [violation] = check_trace(late, Deadline(ttft=0.5))
    assert (violation.bound, violation.limit) == ("ttft", 0.5)
    assert violation.measured == pytest.approx(0.9)
    assert violation.detail == "empty answer (allowed) ended after 0.900 s > ttft deadline 0.500 s"


def test_timeline_elides_the_middle_of_long_streams() -> None:
    trace = make_trace([10 * (i + 1) for i in range(50)] + [2000])
    message = str(check_trace(trace, Deadline(chunk=0.2))[0].timeline)
    assert "(45 chunks)" in message
    assert "chunk 50 (10 B) +1500.0  <-- over 200.0 ms" in message
    assert len(message.splitlines()) < 15
