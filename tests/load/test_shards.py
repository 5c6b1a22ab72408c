"""The shard protocol under sharded loads (``load/shards.py``): a load split into shards, their
results merged, and a lost shard's streams failed, checked directly (the sharded loads' runs are
in tests/load/test_load_shards.py)."""

from __future__ import annotations

import pytest

from pytest_streamguard.load import LoadPlan
from pytest_streamguard.load.shards import lost_traces, merge, split
from pytest_streamguard.stream.client import StreamRequest
from pytest_streamguard.stream.trace import Chunk, StreamTrace

REQUEST = StreamRequest(method="POST", url="http://127.0.0.1:9/generate")


def test_closed_loop_splits_streams_evenly_and_never_makes_an_empty_shard() -> None:
    shards = split(LoadPlan(n=101), REQUEST, 4)
    assert [s.plan.n for s in shards] == [26, 25, 25, 25]
    assert shards[0].describe() == "shard 1 of 4 (26 streams)"
    assert all(s.offsets is None for s in shards)
    assert [s.plan.n for s in split(LoadPlan(n=3), REQUEST, 8)] == [1, 1, 1]
    timed = split(LoadPlan(n=4, duration=2.0), REQUEST, 2)
    assert [(s.plan.n, s.plan.duration) for s in timed] == [(2, 2.0), (2, 2.0)]


@pytest.mark.parametrize("arrival", ["constant", "poisson"])
def test_open_loop_shards_deal_out_the_one_schedule(arrival: str) -> None:
    plan = LoadPlan(n=500, rate=100.0, arrival=arrival, seed=5)
    shards = split(plan, REQUEST, 3)
    # Together the shards send exactly the load's arrivals, each at its planned offset.
    offsets = sorted(o for s in shards for o in (s.offsets or ()))
    assert offsets == plan.start_offsets()
    assert [s.plan.n for s in shards] == [167, 167, 166]
    assert all(s.plan.rate == pytest.approx(100 / 3) for s in shards)
    short = LoadPlan(n=50, rate=2.0, duration=1.0)
    assert [s.offsets for s in split(short, REQUEST, 4)] == [(0.0,), (0.5,)]


def test_a_shards_bound_covers_its_last_start_and_the_stream_limit() -> None:
    assert split(LoadPlan(n=2), REQUEST, 2)[0].bound_s == REQUEST.limits.total
    timed = split(LoadPlan(n=2, duration=3.0), REQUEST, 2)[0]
    assert timed.bound_s == 3.0 + REQUEST.limits.total
    open_loop = split(LoadPlan(n=4, rate=2.0), REQUEST, 2)
    assert open_loop[1].bound_s == 1.5 + REQUEST.limits.total


def _trace(request_ns: int, stamps: list[int]) -> StreamTrace:
    trace = StreamTrace(
        name="x", method="POST", url="u", format="sse", request_ns=request_ns, completed=True
    )
    trace.chunks = [Chunk(i, s, s, 1, "t") for i, s in enumerate(stamps)]
    trace.end_ns = stamps[-1]
    return trace


def test_merge_keeps_every_trace_in_send_order_and_pools_every_sample() -> None:
    # Two shards with very different gaps: the pooled p50 is a sample of the pooled list, not
    # a mean of the shards' p50s.
    fast = [_trace(10, [20, 21, 22, 23]), _trace(30, [40, 41, 42])]
    slow = [_trace(15, [100, 300, 500])]
    results = [
        {"shard": 0, "node": None, "wall_s": 0.5, "traces": [t.to_dict() for t in fast]},
        {"shard": 1, "node": None, "wall_s": 0.7, "traces": [t.to_dict() for t in slow]},
    ]
    merged = merge(LoadPlan(n=3), list(results), origin_ns=0)
    assert [t.request_ns for t in merged.traces] == [10, 15, 30]
    assert sorted(merged.gaps) == sorted([1e-9] * 5 + [2e-7] * 2)
    assert merged.percentile(50) == 1e-9
    assert merged.percentile(90) == 2e-7
    assert merged.wall_s == 0.7


def test_a_lost_shard_leaves_each_of_its_streams_failed() -> None:
    shard = split(LoadPlan(n=6, rate=10.0), REQUEST, 2)[1]
    lost = lost_traces(shard, 1_000_000_000, "network", "shard 2 of 2 died")
    assert len(lost) == 3
    assert [t.request_ns for t in lost] == [1_100_000_000, 1_300_000_000, 1_500_000_000]
    assert all(not t.completed and t.error_kind == "network" for t in lost)
    assert all(t.error == "shard 2 of 2 died" and t.end_ns is not None for t in lost)
    merged = merge(LoadPlan(n=6, rate=10.0), [lost], origin_ns=1_000_000_000)
    assert merged.outcomes == {"network": 3}
