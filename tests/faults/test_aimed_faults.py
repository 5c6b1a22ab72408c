"""Chunk faults aimed at some streams of a test (``streams=``, issue 27): indexes of the test's
streams in request order, or a fraction drawn from the session's seed; the embedded proxy acts
on the aimed streams' connections only, and the other streams are untouched."""

from __future__ import annotations

import json

import pytest

AIMED_AT_2_AND_7 = """
import statistics

BODY = {"max_new_tokens": 12, "interval_s": 0.005}

def test_cut_streams_2_and_7_of_10(streamguard):
    record = streamguard.faults.cut(after_chunks=3, streams=[2, 7])
    result = streamguard.load(10, json=BODY)
    chunks = [len(t.chunks) for t in result.traces]
    assert chunks == [12, 12, 3, 12, 12, 12, 12, 3, 12, 12], chunks
    for index, trace in enumerate(result.traces):
        assert trace.name.startswith(f"stream {index + 1} "), trace.name
        if index in (2, 7):
            assert trace.error_kind in ("cut", "truncated"), trace.error_kind
            assert trace.faults == [record]
        else:
            assert trace.completed, (trace.name, trace.error)
            assert trace.faults == []
    assert record.streams == [2, 7]
    streamguard.faults.clear()
    plain = streamguard.load(10, json=BODY)
    untouched = [t.ttft for i, t in enumerate(result.traces) if i not in (2, 7)]
    # The 1 KB/s hold that once armed a cut made TTFT 526 ms against 25 ms; within 200 ms here,
    # a busy machine's noise (52 ms once, with 4 workers on 2 cores) well below that hold's
    # 0.5 s (benchmarks/fault_precision.py measures the precision itself).
    assert statistics.median(untouched) - statistics.median(t.ttft for t in plain.traces) < 0.2


def test_indexes_count_every_stream_of_the_test(streamguard):
    record = streamguard.faults.stall(after_chunks=2, seconds=0.4, streams=[1, 3])
    first = streamguard.stream(json={"max_new_tokens": 6, "interval_s": 0.005})
    result = streamguard.load(2, json={"max_new_tokens": 6, "interval_s": 0.005})
    last = streamguard.stream(json={"max_new_tokens": 6, "interval_s": 0.005})
    held, free = [result.traces[0], last], [first, result.traces[1]]
    for trace in held:
        assert trace.completed and len(trace.chunks) == 6
        assert trace.max_gap == trace.gaps[1] >= 0.36, (trace.name, trace.gaps)
    for trace in free:
        assert trace.completed and len(trace.chunks) == 6
        # Events 5 ms apart: anything near the 0.4 s stall would be the fault.
        assert trace.max_gap < 0.3, (trace.name, trace.gaps)
    assert record.streams == [1, 3]
    assert streamguard.faults.judge(streamguard.traces) == []
    assert "2 of 2 streams that reached chunk 2" in record.evidence

def test_a_reset_at_chunk_n(streamguard):
    record = streamguard.faults.reset(after_chunks=4, streams=[0])
    aimed = streamguard.stream(json={"max_new_tokens": 12, "interval_s": 0.005})
    other = streamguard.stream(json={"max_new_tokens": 12, "interval_s": 0.005})
    assert len(aimed.chunks) == 4 and aimed.error_kind in ("reset", "cut", "network")
    assert other.completed and len(other.chunks) == 12
    assert record.applied_by == "proxy" and record.streams == [0]
"""


def test_a_cut_aimed_at_two_streams_of_a_load_leaves_the_others_untouched(
    pytester: pytest.Pytester, run
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(AIMED_AT_2_AND_7)
    result = run("--streamguard-strict-faults", "--streamguard-json", "report.json", "-v")
    result.assert_outcomes(passed=3)
    tests = json.loads((pytester.path / "report.json").read_text())["tests"]
    (cut,) = [f for t in tests for f in t["faults"] if f["kind"] == "cut"]
    assert cut["params"] == {"after_chunks": 3, "streams": [2, 7]}
    assert cut["streams"] == [2, 7]
    assert cut["fired"] is True


FRACTION = """
from pytest_streamguard import chosen

def test_a_fraction(streamguard):
    record = streamguard.faults.cut(after_chunks=2, streams=0.3)
    result = streamguard.load(20, json={"max_new_tokens": 6, "interval_s": 0.002})
    cut = [i for i, t in enumerate(result.traces) if len(t.chunks) == 2]
    whole = [i for i, t in enumerate(result.traces) if t.completed and len(t.chunks) == 6]
    assert sorted(cut + whole) == list(range(20))
    assert cut == record.streams == [i for i in range(20) if chosen(streamguard.seed, i, 0.3)]
    print("CUT", streamguard.seed, cut)
"""


def test_a_fraction_aims_at_the_same_streams_under_the_same_seed(
    pytester: pytest.Pytester, run
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(FRACTION)
    seen = []
    for seed in ("7", "7", "8"):
        result = run("--streamguard-seed", seed, "-s", "--streamguard-strict-faults")
        result.assert_outcomes(passed=1)
        seen.append([line[line.index("CUT ") :] for line in result.outlines if "CUT " in line])
    # Worked out once from the seed and each index alone: the same in every run and process.
    assert seen == [
        ["CUT 7 [2, 4, 5, 10, 11, 15, 18]"],
        ["CUT 7 [2, 4, 5, 10, 11, 15, 18]"],
        ["CUT 8 [6, 8, 9, 13, 16]"],
    ]


BAD = """
import pytest

ACCEPTED = "expected a list of the test's stream indexes"

@pytest.mark.parametrize(
    "call, message",
    [
        ("cut(after_chunks=3, streams=1.5)", "streams=1.5): a fraction must be above 0 and at"),
        ("cut(after_chunks=3, streams=0.0)", "streams=0.0): a fraction must be above 0"),
        ("stall(2, 0.5, streams=[-1])", "streams=[-1]): -1 is not a stream index (an integer"),
        ("stall(2, 0.5, streams=['2'])", "streams=['2']): '2' is not a stream index"),
        ("cut(after_chunks=3, streams=6)", "streams=6): " + ACCEPTED),
        ("cut(after_chunks=3, streams=[])", "streams=[]): an empty list aims at no stream"),
        ("cut(after_chunks=3, streams='2')", "streams='2'): " + ACCEPTED),
        ("cut(100, streams=[1])", "streams= aims a cut at chunk N; use it with after_chunks"),
        ("reset(streams=[1])", "streams= aims a reset at chunk N; use it with after_chunks"),
    ],
)
def test_bad(streamguard, call, message):
    with pytest.raises(ValueError) as info:
        eval("streamguard.faults." + call)
    assert message in str(info.value)
    if "streams=6" in call:
        assert "write streams=[6]" in str(info.value)
    assert streamguard.faults.records == []

def test_aimed_at_a_stream_the_test_never_opens(streamguard):
    record = streamguard.faults.cut(after_chunks=2, streams=[5])
    result = streamguard.load(3, json={"max_new_tokens": 4, "interval_s": 0.005})
    assert result.completed == 3
    assert all(t.faults == [] for t in result.traces)
    assert streamguard.faults.judge(streamguard.traces) == [record]
    assert record.streams == []
    assert record.evidence == (
        "aimed at streams=[5], but no stream it aimed at was read while it was on (the test "
        "read 3 streams)"
    )

def test_not_with_processes(streamguard):
    streamguard.faults.cut(after_chunks=3, streams=[1])
    with pytest.raises(ValueError, match="aims at streams by their index.*without processes="):
        streamguard.load(4, json={"max_new_tokens": 4}, processes=2)
"""


def test_bad_streams_say_what_is_accepted(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(BAD)
    run().assert_outcomes(passed=11)
