"""Incident 2, a generation loop that blocks the event loop stalls every stream at once.

``--naive`` iterates a sync ``TextIteratorStreamer`` inside the async handler: while one stream
waits for its next token nothing else on the worker runs. Under 8 concurrent streams the
streams queue behind each other. The normal target (generation off the loop, tokens handed over
with ``call_soon_threadsafe``) serves the same 8 streams within the deadlines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from resilience_helpers import gauge

from pytest_streamguard import DeadlineViolation, StreamGuard, StreamTrace, Target

REQUEST = {"prompt": "eight users at once", "max_new_tokens": 48}
STREAMS = 8


async def eight_streams(streamguard: StreamGuard) -> list[StreamTrace]:
    """The same request on 8 concurrent streams through the proxy."""
    return list(await asyncio.gather(*(streamguard.astream(json=REQUEST) for _ in range(STREAMS))))


class TestNaiveTarget:
    """The anti-pattern, caught."""

    @pytest.fixture(scope="class")
    @classmethod
    def streamguard_target(cls, make_streamguard_target: Callable[..., Target]) -> Target:
        """The bundled target in ``--naive`` mode."""
        return make_streamguard_target(args=["--naive"])

    @pytest.mark.asyncio
    async def test_naive_target_stalls_every_stream(self, streamguard: StreamGuard) -> None:
        traces = await eight_streams(streamguard)
        assert all(t.completed for t in traces), [t.error for t in traces]
        late = []
        for trace in traces:
            try:
                trace.assert_deadline(ttft=0.5, chunk=0.2)
            except DeadlineViolation as exc:
                late.append(str(exc))
        # Only a stream served before the others queued up can make it; most cannot.
        assert len(late) >= STREAMS // 2, late
        assert all("> deadline 0.500 s" in m or "> chunk deadline 0.200 s" in m for m in late)
        # The cause, seen from inside: the target's event loop stopped for far over 0.2 s.
        lag = gauge(streamguard.target, "streamguard_target_event_loop_lag_max_seconds")
        assert lag > 0.2


@pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
@pytest.mark.asyncio
async def test_normal_target_serves_eight_streams_in_time(streamguard: StreamGuard) -> None:
    traces = await eight_streams(streamguard)
    assert all(t.completed for t in traces), [t.error for t in traces]
    assert all(len(t.chunks) == REQUEST["max_new_tokens"] for t in traces)
