"""Helpers shared by the resilience tests."""

from __future__ import annotations

import time
from collections.abc import Callable

from pytest_streamguard import StreamGuard, StreamTrace, Target
from pytest_streamguard.verdict.findings import Finding, findings_of, not_cancelled, target_gauges

#: Fault knobs on; a slow reader's write may block 1 s (not 10) before the stream is ended,
#: so the slow-reader incident resolves within the suite's time budget.
FAULT_KNOBS = ("--allow-fault-knobs", "--send-timeout", "1")


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` until true; return the seconds it took, fail after ``timeout``."""
    start = time.monotonic()
    while not condition():
        waited = time.monotonic() - start
        assert waited < timeout, f"{what}: not true within {timeout:g} s"
        time.sleep(0.01)
    return time.monotonic() - start


def gauge(target: Target, name: str) -> float:
    """The current value of one unlabelled gauge of the target."""
    family = target.metrics()[name]
    return float(family.samples[0].value)


def counter(target: Target, name: str, **labels: str) -> float:
    """The current value of one counter sample of the target (``name`` without ``_total``)."""
    for sample in target.metrics()[name].samples:
        if sample.name == f"{name}_total" and all(
            sample.labels.get(k) == v for k, v in labels.items()
        ):
            return float(sample.value)
    return 0.0


def loop_lags_over(target: Target, seconds: float) -> float:
    """How many of the target's event-loop lag probes so far were late by over ``seconds``
    (a bucket bound of ``streamguard_target_event_loop_lag_seconds``)."""
    counts = {
        sample.labels["le"]: sample.value
        for sample in target.metrics()["streamguard_target_event_loop_lag_seconds"].samples
        if sample.name.endswith("_bucket")
    }
    return float(counts["+Inf"] - counts[repr(float(seconds))])


def assert_faults_fired(streamguard: StreamGuard) -> None:
    """Every fault of the test so far took effect on a stream it was active on: an incident
    that never happened proves nothing (the plugin also reports this after the test)."""
    unfired = streamguard.faults.judge(streamguard.traces)
    assert not unfired, [f"{r.kind}: {r.evidence}" for r in unfired]


def findings(streamguard: StreamGuard, traces: list[StreamTrace] | None = None) -> list[Finding]:
    """What the plugin finds on ``traces`` (default: every stream of the test so far), and
    generation the target kept up after a cut stream (``not_cancelled``), as the test's record
    will show them (beside the probe's samples, as the record reads them)."""
    read = streamguard.traces if traces is None else traces
    found = findings_of(read, streamguard.probe)
    left = not_cancelled(read, target_gauges(streamguard.target.url))
    return found if left is None else [*found, left]


def assert_no_findings(streamguard: StreamGuard, traces: list[StreamTrace] | None = None) -> None:
    """No finding fires on the streams of a fixed variant (false findings: none)."""
    found = findings(streamguard, traces)
    assert found == [], [f.describe() for f in found]
