"""A test's verdict after its body (:mod:`pytest_streamguard.verdict.judge`), on streams built
by hand: which failure is raised, by precedence, with its message; the note a failing body's
own exception gets; and the line that says where the reports are written."""

from __future__ import annotations

from pytest_streamguard.errors import (
    DeadlineViolation,
    FaultsNotFired,
    FindingsFailed,
    StreamguardFailure,
)
from pytest_streamguard.faults.fired import faults_not_fired
from pytest_streamguard.stream.trace import Chunk, FaultRecord, StreamTrace
from pytest_streamguard.verdict.deadlines import (
    Deadline,
    Violation,
    check_traces,
    format_violations,
)
from pytest_streamguard.verdict.findings import Finding
from pytest_streamguard.verdict.judge import body_failure_note, failure_of, reports_line

MS = 1_000_000
REPORT = "every stream's verdict and timeline: the JSON report out/run.json"
SLOW = Deadline(ttft=0.1)


def stream(name: str, ttft_ms: int, chunks: int = 3) -> StreamTrace:
    """A completed stream whose first token came ``ttft_ms`` after its request, then one
    every 10 ms."""
    trace = StreamTrace(
        name=name, method="POST", url="/generate", format="sse", request_ns=0, completed=True
    )
    for index in range(chunks):
        stamp = (ttft_ms + 10 * index) * MS
        trace.chunks.append(Chunk(index, stamp, stamp, 30, f"t{index}"))
    trace.end_ns = (ttft_ms + 10 * chunks) * MS
    return trace


BUFFERED = Finding("buffered", "3 of 3 chunks arrived in one read", ("s0",))
UNFIRED = FaultRecord(
    kind="latency", params={"ms": 200}, toxics=["latency"], fired=False, evidence="no byte"
)


def judged(
    violations: list[Violation],
    traces: list[StreamTrace],
    *,
    gated: list[Finding] | None = None,
    unfired: list[FaultRecord] | None = None,
    strict_faults: bool = False,
    report: str | None = None,
) -> StreamguardFailure | None:
    return failure_of(
        violations,
        traces=traces,
        gated=gated or [],
        unfired=unfired or [],
        strict_faults=strict_faults,
        not_fired=faults_not_fired,
        report=report,
    )


def test_streams_that_pass_raise_nothing() -> None:
    traces = [stream("s0", 50)]
    assert check_traces(traces, SLOW) == []
    assert judged([], traces) is None
    # A fault that never fired fails the test only under --streamguard-strict-faults.
    assert judged([], traces, unfired=[UNFIRED]) is None


def test_a_broken_deadline_comes_first_with_its_message() -> None:
    traces = [stream("s0", 250), stream("s1", 50)]
    violations = check_traces(traces, SLOW)
    failure = judged(violations, traces, gated=[BUFFERED], unfired=[UNFIRED], strict_faults=True)
    assert isinstance(failure, DeadlineViolation)
    assert failure.violations == violations
    message = str(failure)
    assert message == format_violations(violations, traces=traces)
    assert message.startswith("token deadline violated (1 in 1 stream):\n")
    assert "  s0: ttft 0.250 s > deadline 0.100 s; active faults: none" in message.split("\n")


def test_the_report_line_ends_a_deadline_message_that_leaves_streams_out() -> None:
    # Four broken streams: the message shows the worst three and says where the rest is.
    traces = [stream(f"s{i}", 200 + 10 * i) for i in range(4)]
    violations = check_traces(traces, SLOW)
    failure = judged(violations, traces, report=REPORT)
    assert isinstance(failure, DeadlineViolation)
    assert str(failure).split("\n")[-1] == f"  {REPORT}"


def test_gated_findings_come_before_faults_that_never_fired() -> None:
    failure = judged(
        [], [stream("s0", 50)], gated=[BUFFERED], unfired=[UNFIRED], strict_faults=True
    )
    assert isinstance(failure, FindingsFailed)
    assert failure.findings == [BUFFERED]
    assert str(failure) == (
        "streamguard finding(s) this test fails on (fail_on): buffered\n"
        "  buffered: 3 of 3 chunks arrived in one read\n"
        "  the thresholds and what each finding means: docs/findings.md"
    )


def test_faults_that_never_fired_fail_under_strict_faults() -> None:
    failure = judged([], [stream("s0", 50)], unfired=[UNFIRED], strict_faults=True)
    assert isinstance(failure, FaultsNotFired)
    assert failure.faults == [UNFIRED]
    assert str(failure) == (
        "1 fault never fired, so the test proved nothing about it "
        "(--streamguard-strict-faults):\n  latency(ms=200): no byte"
    )


def test_the_faults_failure_is_built_only_when_it_is_the_verdict() -> None:
    built: list[list[str]] = []

    def not_fired(faults: list[str]) -> StreamguardFailure:
        built.append(faults)
        return StreamguardFailure("never fired")

    def verdict(gated: list[Finding], strict: bool) -> StreamguardFailure | None:
        return failure_of(
            [],
            traces=[],
            gated=gated,
            unfired=["cut()"],
            strict_faults=strict,
            not_fired=not_fired,
            report=None,
        )

    assert verdict([], strict=False) is None
    assert isinstance(verdict([BUFFERED], strict=True), FindingsFailed)
    assert built == []
    assert str(verdict([], strict=True)) == "never fired"
    assert built == [["cut()"]]


def test_a_failing_body_gets_the_deadline_verdict_as_a_note() -> None:
    traces = [stream("s0", 250)]
    violations = check_traces(traces, SLOW)
    note = body_failure_note(
        AssertionError("assert 29 == 30"), violations, traces=traces, report=REPORT
    )
    assert note == (
        "streamguard: this test's streams also broke its token deadline "
        "(checked after the body):\n" + format_violations(violations, traces=traces, report=REPORT)
    )
    assert note.split("\n")[1] == "token deadline violated (1 in 1 stream):"


def test_no_note_when_the_streams_met_the_deadline() -> None:
    traces = [stream("s0", 50)]
    note = body_failure_note(AssertionError("assert 29 == 30"), [], traces=traces, report=None)
    assert note is None


def test_no_note_on_the_bodys_own_deadline_check() -> None:
    # The body's explicit assert_deadline raised it: its message already says what the note
    # would.
    traces = [stream("s0", 250)]
    violations = check_traces(traces, SLOW)
    raised = DeadlineViolation(format_violations(violations, traces=traces), violations)
    assert body_failure_note(raised, violations, traces=traces, report=None) is None


def test_the_reports_line_names_the_reports_asked_for() -> None:
    assert reports_line(html=None, json=None) is None
    assert reports_line(html=None, json="out/run.json") == REPORT
    assert reports_line(html="out/run.html", json="out/run.json") == (
        "every stream's verdict and timeline: the HTML report out/run.html and the "
        "JSON report out/run.json"
    )
