"""Incident 4, the ingress idle timeout cuts a stream between two tokens.

A real nginx with ``proxy_read_timeout 0.5s`` sits between the proxy and the target, and the
target stalls 0.8 s after token 5. nginx closes the stream; the plugin reports the cut. The fix
is heartbeats (``: ping`` comments) during a stall: with ``--heartbeat 0.15`` the same stall
survives the ingress, and the chunk deadline, which counts data events only, still shows the
0.8 s stall honestly.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from resilience_helpers import gauge, wait_for

from pytest_streamguard import DeadlineViolation, StreamGuard, Target

REQUEST = {
    "prompt": "behind the load balancer",
    "max_new_tokens": 12,
    "fault": {"stall_after": 5, "stall_s": 0.8},
}


def test_ingress_read_timeout_cuts_the_stalled_stream(streamguard: StreamGuard) -> None:
    streamguard.ingress(read_timeout=0.5)
    trace = streamguard.stream(json=REQUEST, read_timeout=5.0)
    assert not trace.completed
    assert trace.error_kind == "cut", trace.error
    # Tokens 0..5 went out before the stall; nginx closed the body during the silence.
    assert len(trace.chunks) == 6
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

    # The bound that matters here is survival: ttft as usual, and a chunk bound above the
    # injected 0.8 s stall (the strict 0.2 s bound is checked, and broken, below).
    @pytest.mark.token_deadline(ttft=0.5, chunk=1.5)
    def test_heartbeats_carry_the_stream_through_the_ingress(
        self, streamguard: StreamGuard
    ) -> None:
        streamguard.ingress(read_timeout=0.5)
        trace = streamguard.stream(json=REQUEST)
        assert trace.completed, trace.error
        assert len(trace.chunks) == 12
        assert trace.heartbeats >= 3
        assert trace.max_gap is not None
        assert trace.max_gap >= 0.8
        with pytest.raises(DeadlineViolation, match=r"gap before chunk 6 = 0\.\d+ s > chunk"):
            trace.assert_deadline(chunk=0.2)
