"""Whether a fault took effect (``fired``, ``faults/fired.py``), judged on hand-made traces: each
rule and its evidence sentence (the plugin's real runs, and ``--streamguard-strict-faults``, are
in tests/faults/test_fired_runs.py)."""

from __future__ import annotations

from pytest_streamguard.faults.fired import judge
from pytest_streamguard.faults.profiles import Toxic
from pytest_streamguard.stream.recorded import Recorded
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


def test_a_chunk_fault_that_never_landed_names_a_coding_the_proxy_cannot_decode() -> None:
    """Issue 45: the proxy counts chunks in a decoded copy; a body in a coding it has no
    decoder for is never counted, and the record says which coding that was."""
    cut = record("cut", after_chunks=3)
    coded = chunked([10, 20, 30, 40])
    coded.recorded = Recorded("POST", "/generate")
    coded.recorded.answered(200, [("Content-Encoding", "x-unknown")])
    fired, evidence = judge(cut, [coded], triggered=[coded])
    assert not fired
    assert "the proxy cannot decode a x-unknown-coded body" in evidence
    coded.recorded.answered(200, [("Content-Encoding", "gzip")])
    assert "cannot decode" not in judge(cut, [coded], triggered=[coded])[1]


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
