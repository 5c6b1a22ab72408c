"""Incident 9, the incident's own check: 30 concurrent streams, pooled p95 gap < 0.2 s and
p95 TTFT < 0.5 s, against the normal target through the proxy."""

from __future__ import annotations

import pytest
from resilience_helpers import assert_no_findings

from pytest_streamguard import StreamGuard

STREAMS = 30
REQUEST = {"prompt": "thirty users", "max_new_tokens": 32}


@pytest.mark.token_deadline(ttft=0.5, chunk=0.2, percentile=95)
def test_thirty_concurrent_streams_meet_p95_deadlines(streamguard: StreamGuard) -> None:
    result = streamguard.load(STREAMS, json=REQUEST)
    assert len(result.traces) == STREAMS
    assert all(t.completed for t in result.traces), [t.error for t in result.traces]
    gap_p95, ttft_p95 = result.percentile(95), result.percentile(95, "ttft")
    assert gap_p95 is not None
    assert ttft_p95 is not None
    assert gap_p95 < 0.2, f"pooled p95 gap {gap_p95:.3f} s"
    assert ttft_p95 < 0.5, f"pooled p95 TTFT {ttft_p95:.3f} s"
    # A server that holds its deadlines under 30 streams shows no finding either (no stalls in
    # common, no staircase of heads, no cold first stream).
    assert result.findings == [], [f.describe() for f in result.findings]
    assert_no_findings(streamguard)
