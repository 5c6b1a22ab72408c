"""The two ingress incidents, reproduced through a real nginx in front of a real SSE server.

Timing tolerances are generous on purpose (2 shared CPU cores): the SSE app spaces its events
0.1 s apart, so a progressive stream spreads over ~1.2 s while a held one arrives in one burst.
"""

from __future__ import annotations

import httpx
import pytest
from ingress_sse import read_stream

from pytest_streamguard.services.ingress import Ingress

EVENTS = 13
INTERVAL_S = 0.1
# A held stream's events arrive in one burst: spread well under one interval.
BURST_SPREAD_S = 0.1
# A progressive stream spreads over (EVENTS - 1) * INTERVAL_S = 1.2 s; allow a third off.
PROGRESSIVE_SPREAD_S = 0.8


def test_read_timeout_cuts_a_stream_that_stalls_longer(sse_upstream: str) -> None:
    with Ingress(sse_upstream, read_timeout=0.5) as ingress:
        seen = read_stream(ingress.url, events=12, interval=0.05, stall_after=5, stall_s=2.0)
        log = ingress.error_log()

    assert isinstance(seen.error, httpx.RemoteProtocolError), seen.error
    assert seen.indices == [0, 1, 2, 3, 4, 5]
    assert not seen.done
    # nginx keeps a read deadline when re-arming would move it by under 300 ms
    # (NGX_TIMER_LAZY_DELAY), so the cut comes 0.2-0.5 s after the last event, not exactly
    # 0.5 s; either way long before the server resumes 2 s after it (0.1-1.2 s allowed).
    silence = seen.ended_at - seen.arrivals[-1]
    assert 0.1 < silence < 1.2, f"cut {silence:.3f} s after the last event"
    assert "upstream timed out" in log


def test_read_timeout_lets_a_steady_stream_through(sse_upstream: str) -> None:
    with Ingress(sse_upstream, read_timeout=0.5) as ingress:
        seen = read_stream(ingress.url, events=12, interval=INTERVAL_S)

    assert seen.error is None
    assert seen.indices == list(range(12))
    assert seen.done


def test_buffering_with_gzip_holds_the_stream_until_its_end(sse_upstream: str) -> None:
    with Ingress(sse_upstream, buffering=True, gzip=True) as ingress:
        seen = read_stream(ingress.url, events=EVENTS, interval=INTERVAL_S, accel=0)

    assert seen.error is None
    assert seen.done
    assert seen.headers.get("content-encoding") == "gzip"
    assert seen.indices == list(range(EVENTS))
    spread = seen.arrivals[-1] - seen.arrivals[0]
    assert spread < BURST_SPREAD_S, f"events spread over {spread:.3f} s, expected one burst"
    # The server needs 1.2 s to write them all; the burst comes only after that.
    assert seen.arrivals[0] > 1.0, f"first event after {seen.arrivals[0]:.3f} s"


@pytest.mark.parametrize(
    ("buffering", "gzip", "accel"),
    [
        pytest.param(True, False, 0, id="buffering-without-gzip"),
        pytest.param(False, True, 0, id="gzip-without-buffering"),
        pytest.param(True, True, 1, id="buffering-gzip-x-accel-buffering-no"),
    ],
)
def test_stream_arrives_progressively(
    sse_upstream: str, buffering: bool, gzip: bool, accel: int
) -> None:
    with Ingress(sse_upstream, buffering=buffering, gzip=gzip) as ingress:
        seen = read_stream(ingress.url, events=EVENTS, interval=INTERVAL_S, accel=accel)

    assert seen.error is None
    assert seen.done
    assert seen.indices == list(range(EVENTS))
    # gzip really applied, so progress is not because compression was skipped.
    assert (seen.headers.get("content-encoding") == "gzip") is gzip
    spread = seen.arrivals[-1] - seen.arrivals[0]
    assert spread > PROGRESSIVE_SPREAD_S, f"events spread over only {spread:.3f} s"
    assert seen.arrivals[0] < 0.5, f"first event after {seen.arrivals[0]:.3f} s"
