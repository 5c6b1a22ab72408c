"""A test's record, built once its body has ended from every guard the test made.

:func:`record_test` judges each guard's faults on that guard's own streams, checks the test's
streams against its deadline, reads from a target the plugin started whether generation went
on after a cut stream, and fills the test's :class:`~.records.TestRecord`: its violations and
its verdict word (``pass``, ``FAIL``, ``caught``, ``error``); :func:`junit_properties` are the
figures the JUnit XML shows for it. What the test raises is decided from what
:func:`record_test` returns, by :func:`pytest_streamguard.verdict.judge.failure_of`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

from pytest_streamguard.guard import StreamGuard, route_of
from pytest_streamguard.report.records import NOT_FIRED, TestRecord
from pytest_streamguard.services.app import Target
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace
from pytest_streamguard.verdict.deadlines import Deadline, Violation, check_traces
from pytest_streamguard.verdict.findings import (
    Finding,
    Unchecked,
    not_cancelled,
    target_gauges,
    unchecked_gates,
)
from pytest_streamguard.verdict.findings.server import kept_going_at
from pytest_streamguard.verdict.probe import Probed, merge

__all__ = ["RecordedTest", "guard_traces", "junit_properties", "matrix_test", "record_test"]


@dataclass(frozen=True)
class RecordedTest:
    """A test's record and what its verdict is made of."""

    #: None when the test read no stream, ran under no profile and applied no fault.
    record: TestRecord | None
    #: Every stream the test read, in the order the requests were sent.
    traces: list[StreamTrace]
    #: How the streams broke the test's deadline (none without a deadline).
    violations: list[Violation]
    #: The findings the test's ``fail_on`` names.
    gated: list[Finding]
    #: The test's faults that never fired.
    unfired: list[FaultRecord]
    #: The samples of every probe the test's guards sent beside their streams (None: off).
    probe: Probed | None = None
    #: The findings its ``fail_on`` names that could not be checked on this target.
    unchecked: list[Unchecked] = field(default_factory=list)


def guard_traces(guards: Sequence[StreamGuard]) -> list[StreamTrace]:
    """Every stream the test's guards read, in the order the requests were sent."""
    traces = [trace for guard in guards for trace in guard.traces]
    return sorted(traces, key=lambda trace: trace.request_ns) if len(guards) > 1 else traces


def matrix_test(nodeid: str, profile: str) -> str:
    """The test a matrix item belongs to: its node id without the profile's id part."""
    if not nodeid.endswith("]") or "[" not in nodeid:
        return nodeid
    prefix, ids = nodeid[:-1].split("[", 1)
    if ids == profile:
        return prefix
    if ids.startswith(profile + "-"):
        return f"{prefix}[{ids[len(profile) + 1 :]}]"
    if ids.endswith("-" + profile):
        return f"{prefix}[{ids[: -len(profile) - 1]}]"
    return nodeid


def _unchecked(
    guards: Sequence[StreamGuard],
    traces: Sequence[StreamTrace],
    probe: Probed | None,
    fail_on: Collection[str],
) -> list[Unchecked]:
    """The gates of ``fail_on`` the test could not check; the target's gauges are read only
    when ``not_cancelled`` is among them, and only from a target the plugin started."""
    if not fail_on:
        return []
    gauges: bool | None = None
    started = [guard for guard in guards if guard.target.process is not None]
    if "not_cancelled" in fail_on and started:
        gauges = all(target_gauges(guard.target.url)() is not None for guard in started)
    found = unchecked_gates(fail_on, traces, probe, gauges=gauges)
    if (
        "server_error" in fail_on
        and traces
        and not any(route_of(guard).output_logs() for guard in guards)
    ):
        reason = "the target is given by URL and names no log file (ini streamguard_log_files)"
        found.append(Unchecked("server_error", f"{reason}: what it writes is unseen"))
    return found


def record_test(
    nodeid: str,
    guards: Sequence[StreamGuard],
    *,
    deadline: Deadline | None,
    fail_on: Collection[str],
    strict_faults: bool,
    body_failed: bool,
    unchecked_fail: bool = False,
) -> RecordedTest:
    """The record of the test ``nodeid`` from every guard it made (``guards``, in the order
    made), judged against its ``deadline`` and the finding names of its ``fail_on`` (a gate it
    could not check fails it under ``unchecked_fail``); ``body_failed``: the body raised (its
    record's verdict is then ``FAIL`` or ``error``)."""
    for guard in guards:
        route_of(guard).hear(guard.traces, wait=True)
    traces = guard_traces(guards)
    # Every hop's faults: the client's own, then a stack's inner hops' (streamguard.hop()).
    faults = [r for guard in guards for hop in route_of(guard).fault_logs for r in hop.records]
    profile = next((g.profile for g in guards if g.profile is not None), None)
    headroom = [found for guard in guards for found in guard.headrooms]
    # A matrix item is kept even without streams (its cell says how it ended), and so is a
    # test that applied faults (whether they fired is part of its verdict) or searched for
    # its headroom.
    if not traces and profile is None and not faults and not headroom:
        return RecordedTest(record=None, traces=[], violations=[], gated=[], unfired=[])
    # Each guard's faults act on its own proxy, so each is judged on its own streams; an inner
    # hop's on the streams of the guard whose client crossed it (pytest_streamguard.faults.hops).
    unfired = [f for g in guards for hop in route_of(g).fault_logs for f in hop.judge(g.traces)]
    probe = merge(guard.probe for guard in guards)
    record = TestRecord(nodeid, deadline, traces, faults=faults, headroom=headroom, probe=probe)
    # Generation that went on after a cut stream, on a target the plugin started (no other
    # client uses it) that exports its engine's requests (the bundled one); under a stack, on
    # each of its services: the deepest whose gauges said so has the engine (a gateway that
    # passes /metrics on says the same), and the finding is at the service that kept it going.
    for guard in guards:
        served: dict[str | None, Target] = {
            n: hop.target for n, hop in route_of(guard).hops.items()
        }
        order = [n for n in served if n is not None]
        for name, target in (served or {None: guard.target}).items():
            if target.process is None:
                continue
            left = not_cancelled(guard.traces, target_gauges(target.url))
            if left is not None:
                hop = name and kept_going_at(guard.traces, order, name)
                record.server_findings.append(replace(left, hop=hop))
                break
    if profile is not None:
        record.profile = profile.name
        record.matrix_test = matrix_test(nodeid, profile.name)
    violations: list[Violation] = []
    caught = [headline for trace in traces for headline in trace.caught]
    if deadline is not None:
        violations = check_traces(traces, deadline)
        record.violations = [v.headline() for v in violations]
        record.verdict = "FAIL" if violations else "pass"
    elif caught:
        # No marker, but the test checked explicitly and the plugin found a violation:
        # the test expected it (it went on) or failed on it (body_failed below).
        record.violations = caught
        record.verdict = "caught"
    gated = [f for f in record.findings if f.name in fail_on]
    if gated:
        record.violations += [f"finding {f.describe()} (fail_on)" for f in gated]
        record.verdict = "FAIL"
    record.unchecked = _unchecked(guards, traces, probe, fail_on)
    if record.unchecked and unchecked_fail:
        record.violations += [u.describe() for u in record.unchecked]
        record.verdict = "FAIL"
    if unfired and strict_faults and not body_failed:
        record.violations += [f"{NOT_FIRED}{f.describe()}: {f.evidence}" for f in unfired]
        record.verdict = "FAIL"
    if body_failed:
        record.verdict = "FAIL" if caught or violations else "error"
    if record.verdict not in ("FAIL", "error"):
        # A passing test keeps none of what the servers said, but keeps what it showed.
        record.server_findings += [f for f in record.findings if f.name == "server_error"]
        for trace in traces:
            trace.said = []
    return RecordedTest(
        record=record,
        traces=traces,
        violations=violations,
        gated=gated,
        unfired=unfired,
        probe=probe,
        unchecked=record.unchecked if unchecked_fail else [],
    )


def junit_properties(record: TestRecord) -> list[tuple[str, str]]:
    """The test's JUnit XML properties: its worst TTFT and largest gap (seconds, when it read
    any), its verdict, and its matrix profile (for a matrix item)."""
    properties = []
    ttft, max_gap = record.worst_ttft(), record.max_gap()
    if ttft is not None:
        properties.append(("streamguard_ttft_s", f"{ttft:.6f}"))
    if max_gap is not None:
        properties.append(("streamguard_max_gap_s", f"{max_gap:.6f}"))
    properties.append(("streamguard_verdict", record.verdict))
    if record.profile is not None:
        properties.append(("streamguard_profile", record.profile))
    return properties
