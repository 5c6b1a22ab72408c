"""Incident 8 (network): latency shifts TTFT but not the gaps; jitter shows in the gaps.

A ``latency`` toxic delays every chunk by the same amount, so the stream arrives later but
keeps its rhythm: TTFT grows by the latency and only a TTFT bound can break. ``jitter`` varies
the delay per chunk, which is what the gaps see. The verdicts follow the numbers.
"""

from __future__ import annotations

import pytest

from pytest_streamguard import DeadlineViolation, StreamGuard, StreamTrace, percentile

REQUEST = {"prompt": "over a long wire", "max_new_tokens": 48}
# Slack for a loaded 2-core machine.
TOLERANCE = 0.1


def test_latency_moves_ttft_not_gaps(streamguard: StreamGuard) -> None:
    base = streamguard.stream(json=REQUEST)
    streamguard.faults.latency(600)
    late = streamguard.stream(json=REQUEST)
    assert base.completed, base.error
    assert late.completed, late.error
    assert base.ttft is not None
    assert late.ttft is not None
    assert late.ttft - base.ttft >= 0.6 - 0.01
    assert late.ttft - base.ttft < 0.6 + TOLERANCE
    base_p50, late_p50 = base.percentile(50), late.percentile(50)
    assert base_p50 is not None
    assert late_p50 is not None
    assert abs(late_p50 - base_p50) < 0.05
    # The verdict: only TTFT is over; no gap is.
    with pytest.raises(DeadlineViolation) as caught:
        late.assert_deadline(ttft=0.5, chunk=0.2)
    assert [v.bound for v in caught.value.violations] == ["ttft"]
    assert "latency(ms=600" in str(caught.value)


@pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
def test_latency_within_the_budget_passes(streamguard: StreamGuard) -> None:
    streamguard.faults.latency(200)
    trace = streamguard.stream(json=REQUEST)
    assert trace.ttft is not None
    assert trace.ttft >= 0.2


def transit(trace: StreamTrace) -> list[float]:
    """Seconds from the target's write (``sent_ns``, same monotonic clock) to arrival, per
    data event."""
    return [(c.stamp_ns - c.data["sent_ns"]) / 1e9 for c in trace.chunks]


# Longer than the jitter window: the proxy never reorders, so an early long delay holds the
# events behind it, and a stream shorter than the window can leave the proxy in one burst.
JITTER_REQUEST = {**REQUEST, "max_new_tokens": 120}


def test_jitter_shows_in_the_gaps(streamguard: StreamGuard) -> None:
    base = streamguard.stream(json=JITTER_REQUEST)
    streamguard.faults.latency(200, jitter=150)
    jittery = streamguard.stream(json=JITTER_REQUEST)
    assert base.completed, base.error
    assert jittery.completed, jittery.error
    # Latency alone delays every event alike; jitter (±150 ms) delays some events well past
    # the 200 ms (each event waits at least its own draw, and 120 draws reach far above it)...
    # (p5 to p95 of the unjittered transits: a scheduling hiccup on the 2 shared cores, where
    # the model's own threads run too, can hold one event for tens of ms)
    base_transit = transit(base)
    assert percentile(base_transit, 95) - percentile(base_transit, 5) < 0.05  # type: ignore[operator]
    assert max(transit(jittery)) > 0.2 + 0.05
    # ...and the spread reaches the gaps: events leave the proxy in bursts with waits between
    # them. The p95 gap, not the single largest, so one scheduling hiccup of the unjittered
    # stream cannot decide it (simulated for 120 events 2.6 ms apart: the jittered p95 is
    # over 9 ms in 5,000 of 5,000 runs; the unjittered one is a few ms).
    base_p95, jittery_p95 = base.percentile(95), jittery.percentile(95)
    assert base_p95 is not None
    assert jittery_p95 is not None
    assert jittery_p95 > base_p95 + 0.005
    assert jittery.max_gap is not None
    # The verdict follows the measured gaps: a chunk bound breaks exactly when a gap is over.
    for bound in (0.05, 0.2, 0.4):
        if jittery.max_gap > bound:
            with pytest.raises(DeadlineViolation) as caught:
                jittery.assert_deadline(chunk=bound)
            assert [v.bound for v in caught.value.violations] == ["chunk"]
        else:
            jittery.assert_deadline(chunk=bound)
