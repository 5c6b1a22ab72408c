"""Chunk faults on the embedded server land exactly at chunk N of every stream (issue 27).

The proxy counts chunks in each response's bytes as ``trace.chunks`` counts them (heartbeats,
role-only deltas and ``[DONE]`` are not chunks), and acts right after the Nth: these runs check
that on the bundled app's three kinds of stream and on a load at 1,000 events/s.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from toxiproxy_fronts import toxiproxy_2x


def test_a_chunk_cut_leaves_exactly_n_chunks_on_every_kind_of_stream(
    pytester: pytest.Pytester, run
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
import pytest

BODY = {"max_new_tokens": 12, "interval_s": 0.005, "heartbeat_s": 0.001}

@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/ndjson"])
def test_cut(streamguard, path):
    body = dict(BODY, stream=True)
    record = streamguard.faults.cut(after_chunks=5)
    assert record.applied_by == "proxy"
    assert record.to_dict()["applied_by"] == "proxy"
    assert record.toxics and "streamguard_chunk_cut" in record.toxics[0]
    for _ in range(2):
        trace = streamguard.stream(path, json=body)
        assert len(trace.chunks) == 5, (path, len(trace.chunks), trace.error_kind)
        assert trace.error_kind in ("cut", "truncated"), trace.error_kind

def test_a_load_at_1000_events_per_second(streamguard):
    streamguard.faults.cut(after_chunks=5)
    result = streamguard.load(20, json={"max_new_tokens": 40, "interval_s": 0.001})
    assert [len(t.chunks) for t in result.traces] == [5] * 20

def test_a_stall_lands_at_chunk_5_on_every_stream(streamguard):
    record = streamguard.faults.stall(after_chunks=5, seconds=0.3)
    result = streamguard.load(20, json={"max_new_tokens": 20, "interval_s": 0.001})
    assert result.completed == 20
    for trace in result.traces:
        gaps = trace.gaps
        worst = max(range(len(gaps)), key=gaps.__getitem__)
        # gaps[4] is the wait between chunk 5 and chunk 6.
        assert worst == 4 and gaps[4] >= 0.27, (trace.name, worst, gaps[4])
        assert sorted(gaps)[-2] < 0.15, (trace.name, sorted(gaps)[-2])

def test_a_reset_at_chunk_5_ends_every_stream_of_a_load_at_once(streamguard):
    # A reset is an error on the socket: on uvloop (the sync load's loop) it once went unseen
    # and the stream waited out its read timeout instead.
    streamguard.faults.reset(after_chunks=5)
    result = streamguard.load(
        40, json={"max_new_tokens": 40, "interval_s": 0.001}, read_timeout=10
    )
    kinds = [(len(t.chunks), t.error_kind) for t in result.traces]
    assert kinds == [(5, "reset")] * 40, kinds
    assert max(t.total for t in result.traces) < 5.0

def test_without_a_fault_nothing_is_cut(streamguard):
    trace = streamguard.stream(json={"max_new_tokens": 12, "interval_s": 0.001})
    assert trace.completed and len(trace.chunks) == 12
"""
    )
    result = run("--streamguard-strict-faults", "-v")
    result.assert_outcomes(passed=7)


@pytest.fixture
def toxiproxy_2x_url(toxiproxy_url: str) -> Iterator[str]:
    """A Toxiproxy 2.x API: the real toxiproxy-server that STREAMGUARD_TOXIPROXY_SERVER names,
    or else a 2.12.0 front over the embedded server that refuses its chunk toxics as the real
    server refuses an unknown toxic type (tests/toxiproxy_fronts.py)."""
    with toxiproxy_2x(toxiproxy_url) as url:
        yield url


NEEDS = "needs the embedded Toxiproxy server"

REFUSED_CALLS = """
import pytest

from pytest_streamguard import NeedsEmbeddedToxiproxy

CALLS = [
    "cut(after_chunks=3)",
    "stall(after_chunks=3, seconds=0.5)",
    "reset(after_chunks=3)",
    "cut(after_chunks=3, streams=[1])",
    "stall(after_chunks=3, seconds=0.5, streams=0.3)",
]

@pytest.mark.parametrize("call", CALLS)
def test_skipped(streamguard, call):
    streamguard.faults.latency(5)
    eval("streamguard.faults." + call)
    raise AssertionError("not reached: the fault is refused when called")

@pytest.mark.parametrize("call", CALLS)
def test_caught(streamguard, call):
    with pytest.raises(NeedsEmbeddedToxiproxy) as info:
        eval("streamguard.faults." + call)
    assert isinstance(info.value, ValueError)
    assert "invalid toxic type" in str(info.value)
    assert streamguard.faults.records == []
    trace = streamguard.stream(json={"max_new_tokens": 5, "interval_s": 0.001})
    assert trace.completed and len(trace.chunks) == 5

@pytest.mark.streamguard_matrix("none", "latency-200", "stall-1s", "cut-mid-stream")
def test_matrix(streamguard):
    trace = streamguard.stream(json={"max_new_tokens": 8, "interval_s": 0.001})
    assert trace.completed

def test_the_next_test_streams_through_a_clean_proxy(streamguard):
    trace = streamguard.stream(json={"max_new_tokens": 12, "interval_s": 0.001})
    assert trace.completed and len(trace.chunks) == 12
    assert trace.ttft < 0.5
"""


@pytest.mark.parametrize("strict", [False, True], ids=["plain", "strict-faults"])
def test_on_a_real_toxiproxy_a_chunk_fault_skips_its_test_with_the_reason(
    pytester: pytest.Pytester, toxiproxy_2x_url: str, app_url: str, strict: bool
) -> None:
    """Issue 38: on a Toxiproxy 2.x, a chunk fault called in the body or by a matrix profile
    (``stall-1s``, ``cut-mid-stream``) skips its test naming the embedded server and the
    server's answer: never a failure or a traceback, also under --streamguard-strict-faults;
    the faults applied before it are removed, and a test that catches the refusal goes on."""
    pytester.makepyfile(REFUSED_CALLS)
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_2x_url,
        "--streamguard-target-url",
        app_url,
        "-p",
        "no:cacheprovider",
        "-rs",
        *(["--streamguard-strict-faults"] if strict else []),
    )
    result.assert_outcomes(passed=8, skipped=7)
    out = result.stdout.str()
    for word in ("Traceback", "inject.py", "session.py", "not reached"):
        assert word not in out, out
    for call in ("cut(after_chunks=3)", "stall(after_chunks=3, seconds=0.5, streams=0.3)"):
        result.stdout.fnmatch_lines(
            [f"SKIPPED * test_*.py:*: faults.{call} {NEEDS} *invalid toxic type*"]
        )
    for profile, call in (
        ("stall-1s", "stall(after_chunks=3, seconds=1.0)"),
        ("cut-mid-stream", "cut(after_chunks=3)"),
    ):
        result.stdout.fnmatch_lines(
            [f"SKIPPED * test_*.py:*: profile '{profile}': faults.{call} {NEEDS}*"]
        )


def test_a_chunk_cut_through_a_gzip_ingress_leaves_exactly_n_chunks(
    pytester: pytest.Pytester, run
) -> None:  # type: ignore[no-untyped-def]
    """Issue 45: the client asks for gzip, a real nginx compresses the stream, and the proxy in
    front of it still cuts right after chunk 3 (it counts in a decoded copy)."""
    pytester.makepyfile(
        """
def test_cut(streamguard):
    streamguard.ingress(gzip=True)
    streamguard.faults.cut(after_chunks=3)
    trace = streamguard.stream(json={"max_new_tokens": 30, "interval_s": 0.01})
    assert trace.recorded is not None
    assert ("content-encoding", "gzip") in trace.recorded.headers
    assert len(trace.chunks) == 3, (len(trace.chunks), trace.error_kind)
"""
    )
    run("--streamguard-strict-faults").assert_outcomes(passed=1)
