"""Incident 4, the ingress idle timeout cuts a stream between two tokens.

A real nginx with ``proxy_read_timeout 1s`` sits between the proxy and the target, and the
target stalls 1.5 s after token 5. nginx closes the stream; the plugin reports the cut. The fix
is heartbeats (``: ping`` comments) during a stall: with ``--heartbeat 0.15`` the same stall
survives the ingress, and the chunk deadline, which counts data events only, still shows the
1.5 s stall honestly.

The figures keep every race in the test wide on a busy 2-core machine: the stall outlasts the
ingress's timeout by 0.5 s, the tokens before it come tens of ms apart (1 s would be needed for
nginx to cut early), and a heartbeat is due every 0.15 s, so one would have to be 0.85 s late
for nginx to cut the stream the heartbeats carry.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from resilience_helpers import assert_faults_fired, gauge, wait_for

from pytest_streamguard import DeadlineViolation, StreamGuard, Target

READ_TIMEOUT_S = 1.0
STALL_S = 1.5
REQUEST = {
    "prompt": "behind the load balancer",
    "max_new_tokens": 12,
    "fault": {"stall_after": 5, "stall_s": STALL_S},
}


def test_ingress_read_timeout_cuts_the_stalled_stream(streamguard: StreamGuard) -> None:
    streamguard.ingress(read_timeout=READ_TIMEOUT_S)
    trace = streamguard.stream(json=REQUEST, read_timeout=5.0)
    assert_faults_fired(streamguard)
    assert not trace.completed
    assert trace.error_kind == "cut", trace.error
    # Tokens 0..5 went out before the stall; nginx closed the body during the silence.
    assert len(trace.chunks) == 6
    # The finding names the silence: a round second, nginx's read timeout.
    assert [f.name for f in trace.findings] == ["idle_cut"], trace.findings
    assert trace.findings[0].data["round_s"] == READ_TIMEOUT_S, trace.findings
    with pytest.raises(
        DeadlineViolation, match=r"stream did not complete .* after 6 chunk.*ingress\(read_timeout"
    ):
        trace.assert_deadline(ttft=0.5, chunk=0.2)
    wait_for(
        lambda: gauge(streamguard.target, "streamguard_target_active_streams") == 0,
        1.0,
        "the cut stream's slot released",
    )


class TestWithHeartbeats:
    """The fix: heartbeats keep the ingress's read deadline moving during a stall."""

    @pytest.fixture(scope="class")
    @classmethod
    def streamguard_target(cls, make_streamguard_target: Callable[..., Target]) -> Target:
        """The bundled target with fault knobs and a heartbeat every 0.15 s of silence."""
        return make_streamguard_target(args=["--allow-fault-knobs", "--heartbeat", "0.15"])

    # The bound that matters here is survival: ttft as usual, and a chunk bound twice the
    # injected 1.5 s stall (the strict 0.2 s bound is checked, and broken, below).
    @pytest.mark.token_deadline(ttft=0.5, chunk=2 * STALL_S)
    def test_heartbeats_carry_the_stream_through_the_ingress(
        self, streamguard: StreamGuard
    ) -> None:
        streamguard.ingress(read_timeout=READ_TIMEOUT_S)
        trace = streamguard.stream(json=REQUEST)
        assert_faults_fired(streamguard)
        assert trace.completed, trace.error
        assert len(trace.chunks) == 12
        assert trace.heartbeats >= 3
        assert trace.findings == [], trace.findings
        assert trace.max_gap is not None
        # Heartbeats are not data: the gap is the stall, not their 0.15 s rhythm. (Not the full
        # 1.5 s: token 5 can reach the client late on a busy machine, shortening the gap after
        # it; 1.49 s was seen.)
        assert trace.max_gap > STALL_S / 2
        with pytest.raises(DeadlineViolation, match=r"gap before chunk 6 = \d+\.\d+ s > chunk"):
            trace.assert_deadline(chunk=0.2)
