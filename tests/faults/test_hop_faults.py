"""A fault on an inner hop that made the service in front cut or fail the client's stream
fired (:func:`pytest_streamguard.faults.hops.cut_in_front`), judged on streams built by hand."""

from __future__ import annotations

from pytest_streamguard.faults.hops import cut_in_front
from pytest_streamguard.stream.trace import Chunk, FaultRecord, StreamTrace

MS = 1_000_000


def stream(name: str, chunks: int, *, kind: str | None, record: FaultRecord) -> StreamTrace:
    """``chunks`` tokens 50 ms apart, then an end 0.5 s later (``kind``: None, completed)."""
    trace = StreamTrace(name, "POST", "/generate", "sse", request_ns=0, response_ns=5 * MS)
    for index in range(chunks):
        stamp = (20 + 50 * index) * MS
        trace.chunks.append(Chunk(index, stamp, stamp, 30, f"t{index}"))
    trace.end_ns = (20 + 50 * chunks + 500) * MS
    trace.completed, trace.error_kind = kind is None, kind
    trace.faults = [record]
    return trace


def test_a_stall_on_the_model_hop_that_nginx_cut_fired() -> None:
    # A 0.6 s stall after chunk 3; nginx's 0.5 s read timeout cut the stream first, so the
    # stream never waited 90 % of the stall (the rule on the client's own hop).
    stall = FaultRecord("stall", {"after_chunks": 3, "seconds": 0.6}, [], on_ns=150 * MS)
    stall.hop = "model"
    evidence = cut_in_front(stall, [stream("stream 1", 3, kind="truncated", record=stall)], "model")
    assert evidence is not None
    assert evidence.startswith("stream 1 ended truncated after 0 bytes while it held model's")


def test_a_hold_with_no_stream_cut_in_front_did_not_fire_that_way() -> None:
    stall = FaultRecord("stall", {"after_chunks": 3, "seconds": 0.6}, [], on_ns=150 * MS)
    completed = stream("stream 1", 8, kind=None, record=stall)
    # Cut at another chunk than the stall's: not the stall's doing.
    elsewhere = stream("stream 2", 6, kind="truncated", record=stall)
    # The plugin's own client gave up: not the service in front.
    gave_up = stream("stream 3", 3, kind="timeout", record=stall)
    assert cut_in_front(stall, [completed, elsewhere, gave_up], "model") is None
    # A fault that ends streams is judged by its own rule, not this one.
    cut = FaultRecord("cut", {"after_bytes": 0}, [], on_ns=0)
    assert cut_in_front(cut, [stream("stream 4", 0, kind="http", record=cut)], "model") is None


def test_a_latency_on_the_model_hop_answered_504_in_front_fired() -> None:
    latency = FaultRecord("latency", {"ms": 800}, [], on_ns=0)
    answered = stream("stream 1", 0, kind="http", record=latency)
    answered.status_code = 504
    assert cut_in_front(latency, [answered], "model") is not None
