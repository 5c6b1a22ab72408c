"""Incident 6, a slow reader: a throttled client backs up the server's socket.

The network between the proxy and this client moves 2 KB/s while the target generates a few
hundred times faster, 1 KB events (``pad_bytes``, as heavy as chunks with logprobs). With the
kernel left to grow its send buffer to megabytes, a whole answer fits in buffers and the server
never notices; production servers bound it, and so does this target variant
(``--send-buffer 8192``). Once the buffers (tens of KB between the target and the proxy, whose
upstream socket is small under a ``bandwidth`` toxic: docs/faults.md, "Which buffers a slow
reader fills") are full the target's writes block, its per-stream backlog reaches
``--max-backlog`` tokens, and it ends that stream with an error instead of buffering without
bound. A normal stream read at the same time keeps its deadlines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from resilience_helpers import (
    FAULT_KNOBS,
    assert_faults_fired,
    assert_no_findings,
    counter,
    findings,
    wait_for,
)

from pytest_streamguard import DeadlineViolation, Finding, StreamGuard, Target
from pytest_streamguard.stream.client import StreamRecorder, aread_stream
from pytest_streamguard.stream.request import ReadLimits, StreamRequest

# A long answer of 1 KB events (2 MB in all): several times what the buffers between the target
# and the throttled client hold, so the outcome does not hang on the exact buffer sizes.
SLOW = {"prompt": "a long answer", "max_new_tokens": 2000, "fault": {"pad_bytes": 1000}}
NORMAL = {"prompt": "a short answer", "max_new_tokens": 64}
# The target's bound on what it holds for one stream: it ends a stream whose backlog reaches
# this many tokens (its slow_reader cancellation counter says so). Its resident memory is no
# measure of that bound: the whole answer is 2 MB, and on CUDA the target's first long
# generation grows host memory once by gigabytes (+2,509 MiB on an H200, then +0).
BACKLOG = 64


@pytest.fixture(scope="module")
def streamguard_target(make_streamguard_target: Callable[..., Target]) -> Target:
    """The bundled target with a fixed 8 KiB socket send buffer and a 64-token backlog."""
    return make_streamguard_target(
        args=[*FAULT_KNOBS, "--send-buffer", "8192", "--max-backlog", str(BACKLOG)]
    )


@pytest.mark.asyncio
async def test_slow_reader_is_ended_with_an_error_while_others_keep_deadlines(
    streamguard: StreamGuard,
) -> None:
    target = streamguard.target
    assert target.pid is not None
    ended_before = counter(target, "streamguard_target_streams_cancelled", reason="slow_reader")

    streamguard.faults.bandwidth(2)
    slow = asyncio.create_task(streamguard.astream("/generate", json=SLOW, read_timeout=5.0))
    # A normal client of the same server, not behind the throttled network.
    normal = await aread_stream(
        StreamRecorder(
            StreamRequest("POST", target.url + "/generate", NORMAL, limits=ReadLimits(5.0, 5.0)),
            "normal stream (direct)",
        )
    )
    await asyncio.to_thread(
        wait_for,
        lambda: (
            counter(target, "streamguard_target_streams_cancelled", reason="slow_reader")
            == ended_before + 1
        ),
        30.0,
        "the target ended the slow reader's stream",
    )

    # Let the network go, so the client drains what the buffers held and sees the end.
    streamguard.faults.clear()
    trace = await slow
    assert_faults_fired(streamguard)

    assert normal.completed, normal.error
    # A server held by the slow reader's writes would hold this stream for the 1 s send timeout
    # (FAULT_KNOBS) at least; one that is not gives it a prefill and batch steps (tens of ms, up
    # to 0.15 s on a busy 2-core machine generating the slow stream too): half the send timeout
    # tells the two apart.
    normal.assert_deadline(ttft=0.5, chunk=0.5)
    assert not trace.completed
    # Ended long before its end: the buffers hold a few hundred of these events, not 2,000.
    assert len(trace.chunks) < 1000
    assert trace.error is not None
    assert "slow reader" in trace.error or trace.error_kind in ("cut", "reset"), trace.error
    with pytest.raises(DeadlineViolation, match="stream did not complete"):
        trace.assert_deadline(ttft=0.5, chunk=0.2)
    # The finding: the slow stream's events waited behind the throttled reads; the stream read
    # beside it shows none, and the target stopped generating once it ended the slow one.
    assert [f.name for f in trace.findings if not own(f)] == ["backpressure"], trace.findings
    print(next(f for f in trace.findings if f.name == "backpressure").describe())
    assert_no_findings(streamguard, [normal])
    assert [f.name for f in findings(streamguard) if not own(f)] == ["backpressure"]


def own(finding: Finding) -> bool:
    """The plugin's own throttle named where a held stream's pattern would blame the app: once
    the test lifts the throttle, the events held behind it arrive in a few reads at the end,
    in some runs (1 in 18 here) enough of them in two reads for the shape of a buffering hop
    (``buffered``) or of ``bursts``, and the verdict names the ``bandwidth`` fault instead
    (``own_fault``)."""
    return finding.name == "own_fault" and finding.data["fault"].startswith("bandwidth(")


def test_a_throttle_the_reader_keeps_up_with_shows_no_backpressure(
    streamguard: StreamGuard,
) -> None:
    """The fixed side: the same throttle far above what the stream needs (2 MB/s for a
    64-token answer of 1 KB events) holds nothing back, and no finding fires."""
    streamguard.faults.bandwidth(2000)
    trace = streamguard.stream(json={**NORMAL, "fault": {"pad_bytes": 1000}})
    assert trace.completed, trace.error
    assert_faults_fired(streamguard)
    assert_no_findings(streamguard)
