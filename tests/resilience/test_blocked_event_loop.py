"""Incident 2, a generation loop that blocks the event loop stalls every stream at once.

``--naive`` iterates a sync ``TextIteratorStreamer`` inside the async handler: while one stream
waits for its next token nothing else on the worker runs. Under 8 concurrent streams the
streams queue behind each other, each waiting for whole generations of the others. The normal
target (generation off the loop, tokens handed over with ``call_soon_threadsafe``) serves the
same 8 streams side by side.

The 8 requests go out together over one connection pool (``aload``): 8 separate clients would
each build their TLS context first, which on a busy 2-core machine staggered the requests by
about 0.25 s each and charged the test's own set-up to the target's TTFT.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from resilience_helpers import loop_lags_over

from pytest_streamguard import DeadlineViolation, StreamGuard, StreamTrace, Target
from pytest_streamguard.findings import findings_of

REQUEST = {"prompt": "eight users at once", "max_new_tokens": 48}
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


async def eight_streams(streamguard: StreamGuard) -> list[StreamTrace]:
    """The same request on 8 concurrent streams through the proxy."""
    return (await streamguard.aload(STREAMS, json=REQUEST)).traces


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
        traces = await eight_streams(streamguard)
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


@pytest.mark.token_deadline(ttft=TTFT, chunk=CHUNK)
@pytest.mark.asyncio
async def test_normal_target_serves_eight_streams_in_time(streamguard: StreamGuard) -> None:
    traces = await eight_streams(streamguard)
    assert all(t.completed for t in traces), [t.error for t in traces]
    assert all(len(t.chunks) == REQUEST["max_new_tokens"] for t in traces)
    assert findings_of(traces) == [], findings_of(traces)
