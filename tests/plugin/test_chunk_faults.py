"""Chunk faults on the embedded server land exactly at chunk N of every stream (issue 27).

The proxy counts chunks in each response's bytes as ``trace.chunks`` counts them (heartbeats,
role-only deltas and ``[DONE]`` are not chunks), and acts right after the Nth: these runs check
that on the bundled app's three kinds of stream and on a load at 1,000 events/s.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pytest_streamguard.services.processes import ManagedProcess, free_port


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
def real_toxiproxy() -> Iterator[str]:
    """The real toxiproxy-server binary named by STREAMGUARD_TOXIPROXY_SERVER, on a free port."""
    binary = os.environ.get("STREAMGUARD_TOXIPROXY_SERVER", "")
    if not binary:
        pytest.skip("STREAMGUARD_TOXIPROXY_SERVER names no real toxiproxy-server binary")
    port = free_port()
    process = ManagedProcess("toxiproxy-server", [binary, "-host", "127.0.0.1", "-port", str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        process.wait_ready(f"{url}/version", 30.0)
        yield url
    finally:
        process.stop()


def test_a_real_toxiproxy_refuses_chunk_faults_naming_the_embedded_server(
    pytester: pytest.Pytester, real_toxiproxy: str, app_url: str
) -> None:
    pytester.makepyfile(
        """
import pytest

@pytest.mark.parametrize(
    "call",
    [
        "cut(after_chunks=3)",
        "stall(after_chunks=3, seconds=0.5)",
        "reset(after_chunks=3)",
        "cut(after_chunks=3, streams=[1])",
        "stall(after_chunks=3, seconds=0.5, streams=0.3)",
    ],
)
def test_refused(streamguard, call):
    with pytest.raises(ValueError) as info:
        eval("streamguard.faults." + call)
    assert f"faults.{call} needs the embedded Toxiproxy server" in str(info.value)
    assert "invalid toxic type" in str(info.value)
    assert streamguard.faults.records == []
    trace = streamguard.stream(json={"max_new_tokens": 5, "interval_s": 0.001})
    assert trace.completed and len(trace.chunks) == 5
"""
    )
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        real_toxiproxy,
        "--streamguard-target-url",
        app_url,
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=5)
