"""Incident 5, a buffering ingress holds the whole stream until its end.

nginx 1.22 with ``proxy_buffering on`` and ``gzip on`` for event streams compresses the stream
into its buffers and sends it when the upstream finishes. The TTFT deadline catches it; the
fixes are ``proxy_buffering off`` at the ingress, or ``X-Accel-Buffering: no`` from the app
(what the bundled target sends by default; the ``accel_header`` knob drops it).
"""

from __future__ import annotations

import pytest

from pytest_streamguard import DeadlineViolation, StreamGuard, StreamTrace

# Long enough (about a second of tokens on a CPU) that holding it back breaks a 0.5 s TTFT.
TOKENS = 800


def request(accel_header: bool) -> dict[str, object]:
    """A long stream, with or without the target's ``X-Accel-Buffering: no``."""
    return {
        "prompt": "buffer me",
        "max_new_tokens": TOKENS,
        "fault": {"accel_header": accel_header},
    }


def test_buffering_gzip_ingress_holds_the_stream_until_its_end(streamguard: StreamGuard) -> None:
    streamguard.ingress(buffering=True, gzip=True)
    trace = streamguard.stream(json=request(accel_header=False), read_timeout=10.0)
    assert trace.completed, trace.error
    assert len(trace.chunks) == TOKENS
    assert trace.ttft is not None
    assert trace.total is not None
    # The first token arrived with (nearly) all the others, at the end of the generation.
    assert trace.ttft > 0.5
    assert trace.ttft > 0.8 * trace.total
    with pytest.raises(AssertionError, match="middle token"):
        assert_flowed(trace)
    # The finding names it, whatever the deadline: most chunks in one or two reads at the end.
    assert [f.name for f in trace.findings] == ["buffered"], trace.findings
    held = r"ttft \d+\.\d{3} s > deadline 0\.500 s.*gzip=True"
    with pytest.raises(DeadlineViolation, match=held) as caught:
        trace.assert_deadline(ttft=0.5, chunk=0.2)
    assert "likely cause: buffered: " in str(caught.value)


def assert_flowed(trace: StreamTrace) -> None:
    """The stream arrived as it was generated: half its tokens by three quarters of its time.

    A held stream's middle token arrives at its end (fraction ~1), a flowing one's about half
    way (~0.5); the bound sits between the two, and being a fraction of the stream's own
    duration it holds on a machine that generates slowly too.
    """
    assert trace.completed, trace.error
    assert len(trace.chunks) == TOKENS
    assert trace.total is not None
    middle = (trace.chunks[TOKENS // 2].stamp_ns - trace.request_ns) / 1e9
    assert middle < 0.75 * trace.total, f"middle token at {middle:.3f} s of {trace.total:.3f} s"
    assert trace.findings == [], trace.findings


# What a buffering ingress breaks is TTFT: the whole stream is held to its end (a second or more
# of generation, several on a busy machine), while a flowing one's first token is one prefill
# away. Its gaps are not what the incident changes, and a busy 2-core machine puts a scheduling
# hiccup of 0.3 s among 800 gaps, so no chunk bound here; assert_flowed checks the rest arrived
# as it came.
@pytest.mark.token_deadline(ttft=0.5)
def test_x_accel_buffering_no_passes_the_buffering_ingress(streamguard: StreamGuard) -> None:
    streamguard.ingress(buffering=True, gzip=True)
    trace = streamguard.stream(json=request(accel_header=True))
    assert_flowed(trace)


@pytest.mark.token_deadline(ttft=0.5)
def test_buffering_off_passes_even_without_the_header(streamguard: StreamGuard) -> None:
    streamguard.ingress(buffering=False, gzip=True)
    trace = streamguard.stream(json=request(accel_header=False))
    assert_flowed(trace)
