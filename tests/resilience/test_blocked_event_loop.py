"""Incident 2, a generation loop that blocks the event loop stalls every stream at once.

``--naive`` iterates a sync ``TextIteratorStreamer`` inside the async handler: while one stream
waits for its next token nothing else on the worker runs. Under 8 concurrent streams the
streams queue behind each other, each waiting for whole generations of the others. The normal
target (generation off the loop, tokens handed over with ``call_soon_threadsafe``) serves the
same 8 streams side by side.

The 8 requests go out together over one connection pool (``aload``): 8 separate clients would
each build their TLS context first, which on a busy 2-core machine staggered the requests by
about 0.25 s each and charged the test's own set-up to the target's TTFT.

``TestFrozenTarget`` brings the same incident to any app with ``faults.freeze``: the target's
process group is stopped for a while, and every stream waits at once; a read timeout shorter
than the block cuts the stream, the fix is one longer than the longest block.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from resilience_helpers import loop_lags_over

from pytest_streamguard import DeadlineViolation, StreamGuard, StreamTrace, Target
from pytest_streamguard.verdict.findings import findings_of

REQUEST = {"prompt": "eight users at once", "max_new_tokens": 48}
# The freeze tests' answer (one stream stopped at its 3rd chunk, or 8 at the 5th): long enough
# that the target is still generating when the client, which sets the freeze off, has read that
# chunk (48 tokens took the tiny model under 0.1 s; with both cores kept busy the client read
# all of them at once, after the generation).
LONG = {"prompt": "one user, a long answer", "max_new_tokens": 400}
# The naive target serves the queued streams one or two at a time, each for its whole answer:
# with 48 tokens a quiet 2-core machine served them in 4 steps 0.25 s apart, and only the last
# two streams passed 0.5 s. 120 tokens make each step about 0.6 s there, so every stream past
# the first step is late however fast the machine (and seconds later with both cores busy).
NAIVE_REQUEST = {**REQUEST, "max_new_tokens": 120}
STREAMS = 8
# A stream queued behind the others waits for their whole generations: seconds here (TTFTs of
# 1.3 to 6 s measured with both cores kept busy, the first stream alone on time). A stream
# served side by side waits one prefill for its first token and one batch step per gap (under
# 0.15 s measured the same way). 0.5 s on both tells the two apart with room either way.
TTFT = 0.5
CHUNK = 0.5
# The target's loop-lag probe ticks every 20 ms; a loop held by a blocking queue.get stays
# held for whole token waits (seconds measured under load), a free one was never late by more
# than 0.05 s during these streams.
BLOCKED_LAG_S = 0.2


async def eight_streams(
    streamguard: StreamGuard, request: dict[str, object] = REQUEST
) -> list[StreamTrace]:
    """The same request on 8 concurrent streams through the proxy."""
    return (await streamguard.aload(STREAMS, json=request)).traces


class TestNaiveTarget:
    """The anti-pattern, caught."""

    @pytest.fixture(scope="class")
    @classmethod
    def streamguard_target(cls, make_streamguard_target: Callable[..., Target]) -> Target:
        """The bundled target in ``--naive`` mode."""
        return make_streamguard_target(args=["--naive"])

    @pytest.mark.asyncio
    async def test_naive_target_stalls_every_stream(self, streamguard: StreamGuard) -> None:
        # Lags from before the test (the start-up, another test) are not this incident's.
        lags_before = loop_lags_over(streamguard.target, BLOCKED_LAG_S)
        traces = await eight_streams(streamguard, NAIVE_REQUEST)
        assert all(t.completed for t in traces), [t.error for t in traces]
        late = []
        for trace in traces:
            try:
                trace.assert_deadline(ttft=TTFT, chunk=CHUNK)
            except DeadlineViolation as exc:
                late.append(str(exc))
        # Only a stream served before the others queued up can make it; most cannot.
        assert len(late) >= STREAMS // 2, late
        assert all("> deadline 0.500 s" in m or "> chunk deadline 0.500 s" in m for m in late)
        # The cause, seen from inside: the target's event loop stopped while they queued.
        assert loop_lags_over(streamguard.target, BLOCKED_LAG_S) > lags_before
        # ... and from outside, as the finding: the streams stalled together or queued up.
        assert "blocked_loop" in [f.name for f in findings_of(traces)], findings_of(traces)
        # ... and the probe beside them (--streamguard-probe: the ready path) waited with them.
        probed = [f for f in findings_of(traces, streamguard.probe) if f.name == "blocked_loop"]
        assert [f.cause.split(":")[0] for f in probed] == ["the event loop was blocked"], probed
        assert probed[0].data["probe_longest_s"] >= BLOCKED_LAG_S, probed


@pytest.mark.token_deadline(ttft=TTFT, chunk=CHUNK)
@pytest.mark.asyncio
async def test_normal_target_serves_eight_streams_in_time(streamguard: StreamGuard) -> None:
    traces = await eight_streams(streamguard)
    assert all(t.completed for t in traces), [t.error for t in traces]
    assert all(len(t.chunks) == REQUEST["max_new_tokens"] for t in traces)
    assert findings_of(traces) == [], findings_of(traces)
    # With the probe's samples too: no stream waited for a slot, and no blame.
    assert findings_of(traces, streamguard.probe) == [], findings_of(traces, streamguard.probe)


class TestFrozenTarget:
    """The same incident on any app: ``faults.freeze`` stops the target's process group, as a
    ``torch.cuda.synchronize()``, a tokenizer holding the GIL or a GC pause stops its loop."""

    @pytest.mark.asyncio
    async def test_a_blocked_loop_stalls_every_stream_at_once(
        self, streamguard: StreamGuard
    ) -> None:
        record = streamguard.faults.freeze(0.5, after_chunks=5)
        # Long answers: with 48 tokens and both cores busy, the client read chunk 5 (which
        # sets the freeze off) after the target had sent every answer, so the load ended
        # before the freeze did and no stream waited.
        traces = await eight_streams(streamguard, LONG)
        assert all(t.completed for t in traces), [t.error for t in traces]
        # Every stream waited the block's length while the target was stopped (between two
        # of its events, or for its first): the whole server stopped, not one stream.
        assert record.on_ns is not None
        assert record.off_ns is not None
        for trace in traces:
            stamps = [trace.request_ns, *(c.stamp_ns for c in trace.chunks)]
            waits = [
                (after - before) / 1e9
                for before, after in itertools.pairwise(stamps)
                if after >= record.on_ns and before <= record.off_ns
            ]
            assert max(waits, default=0.0) >= 0.45, (trace.name, waits)
        assert streamguard.faults.judge(traces) == []
        assert record.fired

    def test_a_read_timeout_shorter_than_the_block_cuts_the_stream(
        self, streamguard: StreamGuard
    ) -> None:
        record = streamguard.faults.freeze(0.6, after_chunks=3)
        trace = streamguard.stream(json=LONG, read_timeout=0.3)
        assert trace.error_kind == "timeout", trace.error
        assert streamguard.faults.judge([trace]) == []
        assert "ended timeout while the target was stopped" in record.evidence

    def test_the_fix_a_read_timeout_above_the_longest_block(self, streamguard: StreamGuard) -> None:
        # A client (or ingress) read timeout must outlast the longest block the server can
        # have (a GC pause, a synchronize): then the stream only waits, and completes.
        streamguard.faults.freeze(0.6, after_chunks=3)
        trace = streamguard.stream(json=LONG, read_timeout=2.0)
        assert trace.completed, trace.error
        assert max(trace.gaps) >= 0.5
        # One block on one stream: a wait, not a pattern across streams; no finding.
        assert findings_of([trace]) == [], findings_of([trace])
