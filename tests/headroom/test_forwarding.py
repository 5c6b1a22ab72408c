"""The forwarding delay a headroom level records (:mod:`pytest_streamguard.headroom.forwarding`),
on traces built with known stamps; the plugin's runs measure it on a real proxy
(tests/headroom/test_headroom_runs.py)."""

from __future__ import annotations

import pytest

from pytest_streamguard.headroom.forwarding import NOT_MEASURED, forwarding
from pytest_streamguard.headroom.result import Headroom, HeadroomLevel
from pytest_streamguard.stream.trace import Chunk, StreamTrace

MS = 1_000_000


def trace(delays_ms: list[float], *, sent: bool = True, stamps: str = "kernel") -> StreamTrace:
    """A completed stream whose k-th event was sent at k * 50 ms and arrived ``delays_ms[k]``
    later."""
    chunks = []
    for k, delay in enumerate(delays_ms):
        sent_ns = 1_000 * MS + k * 50 * MS
        data = {"index": k, "sent_ns": sent_ns} if sent else {"index": k}
        stamp = sent_ns + int(delay * MS)
        chunks.append(Chunk(k, stamp, stamp, 10, f"t{k}", data))
    return StreamTrace(
        name="stream 1 (POST /generate)",
        method="POST",
        url="http://127.0.0.1:1/generate",
        format="sse",
        request_ns=900 * MS,
        chunks=chunks,
        completed=True,
        stamps=stamps,
    )


def test_each_event_counts_from_its_send_stamp_to_its_arrival() -> None:
    found = forwarding([trace([1.0] * 97 + [2.0, 2.0, 9.0]), trace([0.5] * 100)])
    assert found.figures["forwarding_events"] == 200
    assert found.figures["forwarding_p50_s"] == 0.0005
    assert found.figures["forwarding_p99_s"] == 0.002
    assert found.figures["forwarding_max_s"] == 0.009
    assert found.figures["forwarding_stamps"] == "kernel"
    assert (
        found.line
        == "p50 0.5 ms, p99 2 ms, max 9 ms over 200 events (send stamp to kernel receipt)"
    )


def test_a_client_stamp_is_named_as_such() -> None:
    found = forwarding([trace([1.0, 1.0], stamps="loop")])
    assert found.figures["forwarding_stamps"] == "client"
    assert found.line.endswith("(send stamp to client stamp)")


def test_not_measured_without_send_stamps_and_says_why() -> None:
    found = forwarding([trace([1.0, 2.0], sent=False)])
    assert found.figures == {}
    assert found.line == f"{NOT_MEASURED}: the target's events carry no sent_ns send stamp"


def test_not_measured_when_the_send_stamps_are_on_another_clock() -> None:
    found = forwarding([trace([1.0, -5.0])])
    assert found.line.startswith(f"{NOT_MEASURED}: the events' sent_ns is not on this machine")
    found = forwarding([trace([1.0, 3_600_000.0])])
    assert found.figures == {}


def test_not_measured_for_streams_read_on_other_machines() -> None:
    remote = trace([1.0])
    remote.node = "ray-node-1"
    assert forwarding([remote]).line.startswith(f"{NOT_MEASURED}: streams read on other")


def headroom(levels: list[HeadroomLevel], broke_at: float | None) -> Headroom:
    return Headroom(
        "streams", "streams", 3, broke_at, "TTFT max 0.6 s > 0.3 s", tuple(levels), 8, 1
    )


def test_the_summary_line_gives_the_forwarding_at_the_level_that_broke() -> None:
    held = HeadroomLevel(3, True, {"forwarding_p99_s": 0.0012})
    broke = HeadroomLevel(4, False, {"forwarding_p99_s": 0.0031}, ("TTFT max 0.6 s > 0.3 s",))
    line = headroom([held, broke, held], 4).describe()
    assert line.endswith("; forwarding p99 3.1 ms at 4 streams)"), line
    # Every level held: the forwarding at the value.
    assert headroom([held], None).describe().endswith("; forwarding p99 1.2 ms at 3 streams)")
    unmeasured = HeadroomLevel(4, False, {}, ("TTFT max 0.6 s > 0.3 s",))
    assert headroom([unmeasured], 4).describe().endswith("; forwarding not measured)")


def test_a_latency_levels_own_delay_is_taken_off_and_said() -> None:
    found = forwarding([trace([251.0, 250.5, 252.0])], 0.25, "250 ms latency toxic")
    assert found.figures["forwarding_p50_s"] == pytest.approx(0.001)
    assert found.figures["forwarding_max_s"] == pytest.approx(0.002)
    assert found.line.endswith(
        "(send stamp to kernel receipt, less the level's 250 ms latency toxic)"
    )


def test_a_jitter_levels_toxic_stays_in_the_figures_and_is_said() -> None:
    found = forwarding([trace([40.0, 2.0])], None, "50 ms jitter toxic")
    assert found.figures["forwarding_max_s"] == 0.04
    assert found.line.endswith(
        "(send stamp to kernel receipt, with the level's 50 ms jitter toxic)"
    )
