"""A load's streams judged at once (:func:`pytest_streamguard.judge.parallel.judge_traces`):
here and in the judging processes, with the same verdicts as judging each stream alone.

The streams are the differential harness's generated transcripts of every protocol (a fixed
seed), read by the plugin's recorder (sans-IO, each piece one read) and judged under ``auto``.
"""

from __future__ import annotations

import copy

from streamgen import PROTOCOLS, generate

from pytest_streamguard.judge import JUDGES, judge_trace, parallel
from pytest_streamguard.judge.parallel import (
    PARALLEL_MIN,
    judge_batch,
    judge_traces,
    judging_workers,
)
from pytest_streamguard.stream.client import StreamRecorder
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.stream.trace import StreamTrace

SEED = 3636
PER_PROTOCOL = 8
_BROKEN = {"reset": "reset", "chunked-cut": "cut"}


def read(protocol: str, index: int) -> StreamTrace:
    """Generated transcript ``index`` of ``protocol`` as the plugin's reader records it."""
    transcript = generate(protocol, SEED, index)
    url = "http://127.0.0.1:1/v" + transcript.suffix
    recorder = StreamRecorder(
        StreamRequest("POST", url, {"stream": True}, format=protocol), f"{protocol} {index}"
    )
    recorder.start()
    recorder.response(
        200, transcript.content_type, None, [("content-type", transcript.content_type)]
    )
    for stamp, piece in enumerate(transcript.pieces, start=1000):
        recorder.feed(piece, stamp)
    if transcript.ending in _BROKEN:
        recorder.fail(_BROKEN[transcript.ending], "the connection broke")
    recorder.eof()
    recorder.finish()
    return recorder.trace


def verdict(trace: StreamTrace) -> tuple[object, ...]:
    return (
        trace.name,
        trace.client,
        trace.reader_agrees,
        trace.completed,
        trace.error_kind,
        trace.error,
        trace.end_reason,
        trace.judged,
        [(chunk.stamp_ns, chunk.text, chunk.parts) for chunk in trace.chunks],
    )


def test_a_loads_streams_judged_at_once_get_the_verdicts_each_gets_alone() -> None:
    traces = [read(protocol, index) for protocol in PROTOCOLS for index in range(PER_PROTOCOL)]
    assert len(traces) >= PARALLEL_MIN
    alone = copy.deepcopy(traces)
    for trace in alone:
        judge_trace(trace, "auto")
    judge_traces(traces, "auto")
    assert [verdict(t) for t in traces] == [verdict(t) for t in alone]
    # Every stream was judged (each protocol's client is installed in the test environment).
    assert all(trace.client is not None for trace in traces)
    assert all(trace.reader_agrees is not None for trace in traces)
    if judging_workers() > 0:
        assert parallel._pool is not None


def test_a_judging_process_concludes_what_this_one_does() -> None:
    traces = [read("openai", index) for index in range(4)]
    batch = [("openai", trace.recorded) for trace in traces]
    here = judge_batch(batch)
    pool = parallel._judging_pool()
    if pool is None:  # a single usable core: nothing to compare with
        assert judging_workers() == 0
        return
    there = pool.submit(judge_batch, batch).result(timeout=120)
    assert there == here
    assert [c.client for c in there] == [JUDGES["openai"].name] * 4


def test_none_judges_nothing() -> None:
    traces = [read("openai", index) for index in range(PARALLEL_MIN)]
    before = [verdict(t) for t in traces]
    judge_traces(traces, "none")
    assert [verdict(t) for t in traces] == before
    assert all(trace.client is None for trace in traces)
