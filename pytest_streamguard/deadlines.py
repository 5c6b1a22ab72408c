"""Deadlines on a stream, their verdicts, and the messages a failing test shows.

A verdict names the stream, the chunk index, the measured value, the deadline and the faults
that were active, followed by a compact timeline of the stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_streamguard.stats import ns_to_s, percentile
from pytest_streamguard.trace import StreamTrace

# Chunks shown at each end of the timeline and around each offending chunk.
_TIMELINE_EDGE = 3
_TIMELINE_CONTEXT = 1


@dataclass(frozen=True)
class Deadline:
    """Bounds in seconds; None means "not checked". ``percentile`` applies ``chunk`` to the
    given percentile of gaps instead of to every gap."""

    ttft: float | None = None
    chunk: float | None = None
    total: float | None = None
    percentile: float | None = None

    def describe(self) -> str:
        """``ttft=0.5, chunk=0.2`` for the bounds that are set."""
        parts = [
            f"{name}={value:g}"
            for name, value in (
                ("ttft", self.ttft),
                ("chunk", self.chunk),
                ("total", self.total),
                ("percentile", self.percentile),
            )
            if value is not None
        ]
        return ", ".join(parts) or "no bounds"

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return {
            "ttft": self.ttft,
            "chunk": self.chunk,
            "total": self.total,
            "percentile": self.percentile,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Deadline:
        """Inverse of :meth:`to_dict`."""
        return cls(
            ttft=raw.get("ttft"),
            chunk=raw.get("chunk"),
            total=raw.get("total"),
            percentile=raw.get("percentile"),
        )


@dataclass(frozen=True)
class Violation:
    """One broken bound on one stream."""

    stream: str
    bound: str
    measured: float | None
    limit: float | None
    chunk_index: int | None
    detail: str
    faults: tuple[str, ...]
    timeline: str

    def headline(self) -> str:
        """One line: stream, what was broken, measured vs deadline, active faults."""
        faults = ", ".join(self.faults) if self.faults else "none"
        return f"{self.stream}: {self.detail}; active faults: {faults}"


class DeadlineViolation(AssertionError):
    """Raised when a stream breaks its token deadline (an assertion failure, so the test fails).

    ``violations`` holds the individual :class:`Violation` records.
    """

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        super().__init__(format_violations(violations))


def format_violations(violations: list[Violation]) -> str:
    """The full message: one headline per violation, then each stream's timeline once."""
    streams = {v.stream for v in violations}
    lines = [f"token deadline violated ({len(violations)} in {len(streams)} stream(s)):"]
    lines.extend(f"  {v.headline()}" for v in violations)
    shown: set[str] = set()
    for v in violations:
        if v.stream not in shown:
            shown.add(v.stream)
            lines.append(v.timeline)
    return "\n".join(lines)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:10.1f}"


def timeline(trace: StreamTrace, marks: dict[int, str] | None = None) -> str:
    """A compact, time-ordered view of the stream: ends, marked chunks, fault on/off, errors."""
    marks = marks or {}
    t0 = trace.request_ns
    n = len(trace.chunks)
    keep = set(range(min(_TIMELINE_EDGE, n))) | set(range(max(n - _TIMELINE_EDGE, 0), n))
    for index in marks:
        keep.update(range(index - _TIMELINE_CONTEXT, index + _TIMELINE_CONTEXT + 1))
    events: list[tuple[int, int, str]] = [(t0, 0, "request sent")]
    if trace.response_ns is not None:
        events.append((trace.response_ns, 1, f"response headers ({trace.status_code})"))
    previous = None
    for chunk in trace.chunks:
        if chunk.index in keep:
            gap = "" if previous is None else f" +{(chunk.stamp_ns - previous) / 1e6:.1f}"
            mark = f"  <-- {marks[chunk.index]}" if chunk.index in marks else ""
            events.append((chunk.stamp_ns, 2, f"chunk {chunk.index} ({chunk.nbytes} B){gap}{mark}"))
        previous = chunk.stamp_ns
    for fault in trace.faults:
        if fault.on_ns is not None:
            events.append((fault.on_ns, 1, f"fault on: {fault.describe()}"))
        if fault.off_ns is not None:
            events.append((fault.off_ns, 1, f"fault off: {fault.kind}"))
    if trace.end_ns is not None:
        outcome = "completed" if trace.completed else f"stopped: {trace.error or 'incomplete'}"
        events.append((trace.end_ns, 3, f"end: {outcome}"))
    events.sort(key=lambda e: (e[0], e[1]))
    lines = [f"  timeline of {trace.name} (ms since request sent):"]
    last_chunk_shown = -1
    for stamp, kind, text in events:
        if kind == 2:
            index = int(text.split()[1])
            if index > last_chunk_shown + 1:
                lines.append(f"    {'...':>10}  ({index - last_chunk_shown - 1} chunks)")
            last_chunk_shown = index
        lines.append(f"    {_ms(stamp - t0)}  {text}")
    return "\n".join(lines)


def _fault_names(trace: StreamTrace) -> tuple[str, ...]:
    end = trace.end_ns if trace.end_ns is not None else trace.request_ns
    return tuple(f.describe() for f in trace.faults if f.active_during(trace.request_ns, end))


def check_trace(trace: StreamTrace, deadline: Deadline) -> list[Violation]:
    """Every way ``trace`` breaks ``deadline``; a stream that did not complete always does."""
    found: list[tuple[str, float | None, float | None, int | None, str]] = []
    marks: dict[int, str] = {}
    if not trace.completed:
        trailing = ""
        if trace.chunks and trace.end_ns is not None:
            idle = ns_to_s(trace.end_ns - trace.chunks[-1].stamp_ns)
            trailing = f", {idle:.3f} s after chunk {trace.chunks[-1].index}"
        found.append(
            (
                "completed",
                trace.total,
                None,
                len(trace.chunks),
                f"stream did not complete ({trace.error or 'ended early'}) "
                f"after {len(trace.chunks)} chunk(s){trailing}",
            )
        )
    if deadline.ttft is not None:
        if trace.ttft is None:
            found.append(
                (
                    "ttft",
                    None,
                    deadline.ttft,
                    0,
                    f"no data event arrived (ttft deadline {deadline.ttft:.3f} s)",
                )
            )
        elif trace.ttft > deadline.ttft:
            marks[0] = f"over ttft {deadline.ttft * 1e3:.1f} ms"
            found.append(
                (
                    "ttft",
                    trace.ttft,
                    deadline.ttft,
                    0,
                    f"ttft {trace.ttft:.3f} s > deadline {deadline.ttft:.3f} s",
                )
            )
    gaps = trace.gaps
    if deadline.chunk is not None and gaps:
        if deadline.percentile is not None:
            value = percentile(gaps, deadline.percentile)
            assert value is not None
            if value > deadline.chunk:
                over = [i for i, g in enumerate(gaps) if g > deadline.chunk]
                for i in over:
                    marks[i + 1] = "gap over chunk deadline"
                found.append(
                    (
                        "chunk",
                        value,
                        deadline.chunk,
                        over[0] + 1,
                        f"p{deadline.percentile:g} gap {value:.3f} s > chunk deadline "
                        f"{deadline.chunk:.3f} s ({len(over)} of {len(gaps)} gaps over, "
                        f"first before chunk {over[0] + 1})",
                    )
                )
        else:
            over = [i for i, g in enumerate(gaps) if g > deadline.chunk]
            if over:
                worst = max(over, key=lambda i: gaps[i])
                for i in over:
                    marks[i + 1] = f"over {deadline.chunk * 1e3:.1f} ms"
                found.append(
                    (
                        "chunk",
                        gaps[worst],
                        deadline.chunk,
                        worst + 1,
                        f"gap before chunk {worst + 1} = {gaps[worst]:.3f} s > chunk deadline "
                        f"{deadline.chunk:.3f} s ({len(over)} of {len(gaps)} gaps over)",
                    )
                )
    if deadline.total is not None and trace.total is not None and trace.total > deadline.total:
        found.append(
            (
                "total",
                trace.total,
                deadline.total,
                None,
                f"total {trace.total:.3f} s > deadline {deadline.total:.3f} s",
            )
        )
    if not found:
        return []
    line = timeline(trace, marks)
    faults = _fault_names(trace)
    return [
        Violation(
            stream=trace.name,
            bound=bound,
            measured=measured,
            limit=limit,
            chunk_index=index,
            detail=detail,
            faults=faults,
            timeline=line,
        )
        for bound, measured, limit, index, detail in found
    ]


def check_traces(traces: list[StreamTrace], deadline: Deadline) -> list[Violation]:
    """Every way the streams of one test (or one load) break ``deadline``.

    Without ``percentile`` each stream is checked on its own (:func:`check_trace`). With it,
    ``chunk`` bounds that percentile of the gaps pooled over every stream, so a load of many
    streams is judged on its tail rather than on its single worst gap; ``ttft`` and ``total``
    still bound each stream, and a stream that errored or was cut is still a violation.
    """
    if deadline.percentile is None or deadline.chunk is None:
        return [v for trace in traces for v in check_trace(trace, deadline)]
    per_stream = Deadline(ttft=deadline.ttft, total=deadline.total)
    found = [v for trace in traces for v in check_trace(trace, per_stream)]
    pooled = [(gap, trace, i) for trace in traces for i, gap in enumerate(trace.gaps)]
    if not pooled:
        return found
    value = percentile([gap for gap, _, _ in pooled], deadline.percentile)
    assert value is not None
    if value <= deadline.chunk:
        return found
    over = [(gap, trace, i) for gap, trace, i in pooled if gap > deadline.chunk]
    worst_gap, worst, worst_index = max(over, key=lambda entry: entry[0])
    marks = {i + 1: "gap over chunk deadline" for gap, trace, i in over if trace is worst}
    streams = len({id(trace) for _, trace, _ in over})
    found.append(
        Violation(
            stream=f"{len(traces)} stream(s) pooled",
            bound="chunk",
            measured=value,
            limit=deadline.chunk,
            chunk_index=worst_index + 1,
            detail=(
                f"p{deadline.percentile:g} gap {value:.3f} s > chunk deadline "
                f"{deadline.chunk:.3f} s ({len(over)} of {len(pooled)} gaps over, in {streams} "
                f"stream(s); worst {worst_gap:.3f} s before chunk {worst_index + 1} of "
                f"{worst.name})"
            ),
            faults=_fault_names(worst),
            timeline=timeline(worst, marks),
        )
    )
    return found


def assert_traces(traces: list[StreamTrace], deadline: Deadline) -> None:
    """Raise :class:`DeadlineViolation` if ``traces`` break ``deadline`` (see
    :func:`check_traces`). Each violation's headline is also kept on its stream's ``caught``,
    so the reports show what the plugin found even when the test expects and catches it."""
    violations = check_traces(traces, deadline)
    if violations:
        by_name = {trace.name: trace for trace in traces}
        for violation in violations:
            by_name.get(violation.stream, traces[0]).caught.append(violation.headline())
        raise DeadlineViolation(violations)
