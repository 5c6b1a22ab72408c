"""The plugin's own faults are evidence, never a cause: a gap a fault the plugin applied made
is named as that fault (``own_fault``), never ``buffered``, ``blocked_loop`` or ``idle_cut``
(streams built by hand; the rules are in :mod:`pytest_streamguard.verdict.findings.own`)."""

from __future__ import annotations

from test_finding_patterns import (
    HELD_MS,
    MS,
    every_50_ms,
    make,
    names,
    probed,
    stalled_streams,
)

from pytest_streamguard.stream.trace import FaultRecord, StreamTrace
from pytest_streamguard.verdict.deadlines import Deadline, check_traces, format_violations
from pytest_streamguard.verdict.findings import Finding, findings_of


def fault(kind: str, on_ms: int | None, off_ms: int | None = None, **params: object) -> FaultRecord:
    return FaultRecord(
        kind=kind,
        params=dict(params),
        toxics=[],
        on_ns=None if on_ms is None else on_ms * MS,
        off_ns=None if off_ms is None else off_ms * MS,
        armed_ns=0,
    )


def stalled_at_chunk_5() -> StreamTrace:
    # 24 tokens 20 ms apart; held 1 s after the fifth, the other 19 then came in one read.
    return make("stream 1", 0, [20 * i for i in range(1, 6)] + [1100] * 19)


def test_a_stall_the_plugin_applied_is_its_own_fault_and_not_buffered() -> None:
    alone = stalled_at_chunk_5()
    assert names(alone.findings) == ["buffered"]
    stalled = stalled_at_chunk_5()
    stalled.faults = [fault("stall", 100, 1200, after_chunks=5, seconds=1.0)]
    (finding,) = stalled.findings
    assert finding.describe() == (
        "own_fault: the gap after chunk 5 of stream 1, 1.000 s, is the plugin's own "
        "stall(after_chunks=5, seconds=1.0), not buffered"
    )
    assert finding.data["instead_of"] == "buffered"
    assert finding.cause == (
        "the plugin's own fault stall(after_chunks=5, seconds=1.0) held 1 stream, not the app "
        "(the gap after chunk 5)"
    )
    assert Finding.from_dict(finding.to_dict()) == finding
    # The cause in words leads a deadline's failure.
    violations = check_traces([stalled], Deadline(chunk=0.5))
    first = format_violations(violations, traces=[stalled]).split("\n")[0]
    assert first.startswith("likely cause: the plugin's own fault stall(after_chunks=5")


def test_a_short_latency_does_not_explain_a_long_held_read() -> None:
    # A hop that held the answer 0.9 s, behind the plugin's 100 ms latency: the latency holds
    # a gap of 0.25 s at most (twice 100 ms, plus 0.05 s), so the hop is still named.
    held = make("stream 1", 0, [50, 1000, 1000, 1000, 1000, 1000])
    held.faults = [fault("latency", 0, None, ms=100, jitter=0)]
    assert names(held.findings) == ["buffered"]
    # A bandwidth limit holds bytes as long as its rate says: any gap in its window is its own.
    slow = make("stream 1", 0, [50, 1000, 1000, 1000, 1000, 1000])
    slow.faults = [fault("bandwidth", 0, None, kb_per_second=1)]
    assert names(slow.findings) == ["own_fault"]
    # A real nginx the test put on the way is the hop the finding names, not a fault's gap.
    nginx = make("stream 1", 0, [50, 1000, 1000, 1000, 1000, 1000])
    nginx.faults = [fault("ingress", 0, None, buffering=True)]
    assert names(nginx.findings) == ["buffered"]


def test_the_plugins_cut_is_not_a_hops_read_timeout() -> None:
    cut = make("stream 1", 0, [10, 20, 30], completed=False, end_ms=1030, kind="cut")
    assert names(cut.findings) == ["idle_cut"]
    cut.faults = [fault("cut", 1029)]
    (finding,) = cut.findings
    assert finding.name == "own_fault"
    assert finding.data["instead_of"] == "idle_cut"


def test_shared_stalls_inside_a_freeze_or_a_jitter_are_the_plugins() -> None:
    traces = stalled_streams()
    assert names(findings_of(traces)) == ["blocked_loop"]
    for trace in traces:
        trace.faults = [fault("freeze", 100, 800, seconds=0.7, after_chunks=None)]
    (finding,) = findings_of(traces)
    assert finding.name == "own_fault"
    assert finding.data["instead_of"] == "blocked_loop"
    assert "is the plugin's own freeze(seconds=0.7, after_chunks=None)" in finding.evidence
    # A freeze stops the target: the probe waits under it too, and still clears the app.
    held = probed(every_50_ms(900, HELD_MS))
    assert names(findings_of(traces, held)) == ["own_fault"]
    # A latency whose jitter spans the stalls explains them without the probe ...
    for trace in traces:
        trace.faults = [fault("latency", 0, None, ms=50, jitter=50)]
    assert names(findings_of(traces)) == ["own_fault"]
    # ... but not where the probe, which passes through no fault, waited with the streams.
    (blamed,) = findings_of(traces, held)
    assert blamed.name == "blocked_loop"
    assert blamed.cause.startswith("the event loop was blocked")


def test_a_staircase_taller_than_the_latency_can_make_is_still_blamed() -> None:
    def stairs(step_ms: int) -> list[StreamTrace]:
        return [
            make(f"stream {k}", k, [step_ms * k + 20 * i for i in range(1, 5)], head_ms=step_ms * k)
            for k in range(6)
        ]

    jitter = [fault("latency", 0, None, ms=0, jitter=150)]
    short = stairs(60)  # 0.3 s: within twice a 150 ms jitter
    for trace in short:
        trace.faults = jitter
    assert names(findings_of(short)) == ["own_fault"]
    tall = stairs(200)  # 1.0 s
    for trace in tall:
        trace.faults = jitter
    assert names(findings_of(tall)) == ["blocked_loop"]


def test_a_stall_is_its_own_fault_when_a_few_chunks_trickle_in_after_it() -> None:
    # After the 1 s hold, chunks 6 and 7 came in reads of their own, the other 27 in one.
    trickled = make("stream 1", 0, [20 * i for i in range(1, 6)] + [1100, 1103] + [1110] * 27)
    assert names(trickled.findings) == ["buffered"]
    trickled.faults = [fault("stall", 100, 1200, after_chunks=5, seconds=1.0)]
    (finding,) = trickled.findings
    assert finding.name == "own_fault"
    assert finding.data["gap_s"] == 1.0
