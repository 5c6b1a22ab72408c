"""Deadlines on a stream, their verdicts, and the messages a failing test shows.

A verdict names the stream, the chunk index, the measured value, the deadline and the faults
that were active, followed by a compact timeline of the stream.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

from pytest_streamguard.common.display import counted
from pytest_streamguard.errors import DeadlineViolation
from pytest_streamguard.verdict.findings import Finding, Observed, findings_of
from pytest_streamguard.verdict.hops import at_hops
from pytest_streamguard.verdict.probe import Probed
from pytest_streamguard.verdict.stats import ns_to_s, percentile


class StampedChunk(Protocol):
    """What a verdict reads of a chunk."""

    @property
    def index(self) -> int:
        """Position in the stream."""

    @property
    def stamp_ns(self) -> int:
        """Arrival stamp (``perf_counter_ns``)."""


class CheckedStream(Protocol):
    """What a verdict reads of a stream; :class:`~pytest_streamguard.stream.trace.CheckedStream`.

    Deadlines depend on this shape only, so the trace (which offers ``assert_deadline``) can
    depend on them without a cycle."""

    name: str
    completed: bool
    error: str | None
    error_kind: str | None
    end_ns: int | None
    caught: list[str]
    expect: str | None
    held_open_s: float | None

    @property
    def chunks(self) -> Sequence[StampedChunk]:
        """The stream's tokens in order."""

    @property
    def ttft(self) -> float | None:
        """Request to first token, seconds."""

    @property
    def gaps(self) -> list[float]:
        """Seconds between consecutive tokens."""

    @property
    def total(self) -> float | None:
        """Request to end, seconds."""

    def active_faults(self) -> tuple[str, ...]:
        """The faults that were on while the stream was read, as written in a test."""

    def timeline(self, marks: dict[int, str] | None = None) -> str:
        """A compact view of the stream with ``marks`` on some chunks."""


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
        parts = [f"{name}={value:g}" for name, value in self.to_dict().items() if value is not None]
        return ", ".join(parts) or "no bounds"

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Deadline:
        """Inverse of :meth:`to_dict`."""
        return cls(**{f.name: raw.get(f.name) for f in fields(cls)})


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


#: How much of a verdict the message shows, so that a failing load of many streams fits a
#: screen (60 lines at most): the worst few streams' headlines and timelines, with counts.
SHOWN_STREAMS = 3
SHOWN_HEADLINES = 6
TIMELINE_LINES = 14
#: The distinct errors the hops wrote beside the streams, shown under the header.
SHOWN_SAID = 3
_BOUND_WORDS = {
    "completed": "did not complete",
    "expect": "was not cut as expected",
    "held_open": "held open",
    "ttft": "ttft",
    "chunk": "chunk gap",
    "total": "total",
}
#: Where every stream's verdict can be read when the message is not given a report.
NO_REPORT = (
    "every stream's verdict and timeline: streamguard.traces, or a report "
    "(--streamguard-json PATH, --streamguard-html PATH)"
)


def _severity(violations: list[Violation]) -> tuple[int, float]:
    """Sort key of a stream's violations, worst first: a stream that did not complete, then
    by how far its worst measured value is over its bound."""
    ratio = max(
        (
            v.measured / v.limit
            for v in violations
            if v.measured is not None and v.limit is not None and v.limit > 0
        ),
        default=0.0,
    )
    return (0 if any(v.bound in ("completed", "expect") for v in violations) else 1, -ratio)


def _clip(timeline: str, limit: int) -> list[str]:
    """A timeline in at most ``limit`` lines: its title, its first and last events, and as many
    of its marked lines (``<--``) as fit, with the lines left out counted."""
    lines = timeline.split("\n")
    if len(lines) <= limit:
        return lines
    title, body = lines[0], lines[1:]
    base = {0, 1, 2, len(body) - 2, len(body) - 1}
    marked = [i for i, line in enumerate(body) if "<--" in line]
    for count in range(len(marked), -1, -1):
        keep = sorted(base | set(marked[:count]))
        out = [title]
        previous = -1
        for i in keep:
            if i > previous + 1:
                out.append(f"    {'...':>10}  ({counted(i - previous - 1, 'line')} left out)")
            out.append(body[i])
            previous = i
        if len(out) <= limit:
            return out
    return out


def format_violations(
    violations: list[Violation],
    *,
    traces: Sequence[CheckedStream] | None = None,
    report: str | None = None,
    probe: Probed | None = None,
) -> str:
    """The :class:`~pytest_streamguard.errors.DeadlineViolation` message: a header, the streams'
    outcomes and what they broke (with ``traces``, every stream checked, when more than one),
    the worst streams' headlines and timelines, and where the rest is (``report``).
    Where a finding names its cause in words (the probe backed it, or a hop's exception beside a
    stream that ended early), that cause is the first line, above the header; the errors the
    hops wrote beside the streams follow the header (``server said: HOP: ...``)."""
    by_stream: dict[str, list[Violation]] = {}
    for violation in violations:
        by_stream.setdefault(violation.stream, []).append(violation)
    lines = [f"token deadline violated ({len(violations)} in {counted(len(by_stream), 'stream')}):"]
    # One line about the verdict as a whole goes here, right under the header.
    cause = likely_cause(traces or (), probe=probe)
    words = cause_in_words(traces or (), probe=probe)
    if words:
        lines.insert(0, f"likely cause: {words}")
        lines.append(f"  findings: {cause}")
    elif cause:
        lines.append(f"  likely cause: {cause}")
    said = {s.describe(): s.hop for t in traces or () for s in getattr(t, "said", ()) if s.error}
    lines += [f"  server said: {hop}: {text}" for text, hop in list(said.items())[:SHOWN_SAID]]
    if traces is not None and len(traces) > 1:
        outcomes = Counter("completed" if t.completed else str(t.error_kind) for t in traces)
        broken = Counter(_BOUND_WORDS.get(v.bound, v.bound) for v in violations)
        lines.append(
            f"  {counted(len(traces), 'stream')} read: "
            + ", ".join(f"{n} {outcome}" for outcome, n in outcomes.items())
            + "; violations: "
            + ", ".join(f"{n} {word}" for word, n in broken.items())
        )
    ranked = sorted(by_stream, key=lambda name: _severity(by_stream[name]))
    shown = [v for name in ranked[:SHOWN_STREAMS] for v in by_stream[name]][:SHOWN_HEADLINES]
    lines.extend(f"  {v.headline()}" for v in shown)
    shown_streams = list(dict.fromkeys(v.stream for v in shown))
    hidden = len(violations) - len(shown)
    if hidden:
        more = len(by_stream) - len(shown_streams)
        where = f" in {counted(more, 'more stream')}" if more else ""
        lines.append(f"  ... and {counted(hidden, 'more violation')}{where} (worst shown first)")
    clipped = False
    for name in shown_streams:
        timeline = _clip(by_stream[name][0].timeline, TIMELINE_LINES)
        clipped = clipped or len(timeline) < len(by_stream[name][0].timeline.split("\n"))
        lines.extend(timeline)
    if hidden or clipped:
        lines.append(f"  {report or NO_REPORT}")
    return "\n".join(lines)


#: The error kinds in which the connection ended before the protocol's end: what
#: ``expect="cut"`` expects.
CUT_KINDS = frozenset({"truncated", "cut", "reset", "network"})


def cause_in_words(traces: Sequence[object], probe: Probed | None = None) -> str:
    """The cause the first finding of ``traces`` that has one names in a user's words (the
    probe's samples back it: ``the event loop was blocked: ...``, ``the server was full:
    ...``), or the empty string."""
    observed = [t for t in traces if isinstance(t, Observed)]
    return next((f.cause for f in findings_of(observed, probe) if f.cause), "")


def likely_cause(
    traces: Sequence[object], server: Sequence[Finding] = (), probe: Probed | None = None
) -> str:
    """The findings of ``traces`` (and ``server``: those read from the target's side; ``probe``:
    the probe's samples beside them) in a line (each name once, with its first evidence and how
    many streams showed it), or the empty string when they show none."""
    observed = [t for t in traces if isinstance(t, Observed)]
    if not observed:
        return ""
    first: dict[str, Finding] = {}
    streams: dict[str, set[str]] = {}
    for finding in [*at_hops(findings_of(observed, probe), observed), *server]:
        first.setdefault(finding.name, finding)
        streams.setdefault(finding.name, set()).update(finding.streams)
    parts = []
    for name, finding in first.items():
        more = len(streams[name]) - 1
        also = (
            f" (and {counted(more, 'more stream')})" if more and len(finding.streams) == 1 else ""
        )
        parts.append(finding.describe() + also)
    return "; ".join(parts)


@dataclass
class _Broken:
    """What :func:`check_trace` gathers on one stream, bound by bound: each broken bound
    (bound, measured, limit, chunk index, detail) and the notes to mark on its timeline."""

    found: list[tuple[str, float | None, float | None, int | None, str]] = field(
        default_factory=list
    )
    marks: dict[int, str] = field(default_factory=dict)

    def add(
        self,
        bound: str,
        measured: float | None,
        limit: float | None,
        index: int | None,
        detail: str,
    ) -> None:
        """Record one broken bound."""
        self.found.append((bound, measured, limit, index, detail))

    def violations(self, trace: CheckedStream) -> list[Violation]:
        """The broken bounds as violations of ``trace``, sharing its marked timeline."""
        if not self.found:
            return []
        line = trace.timeline(self.marks)
        faults = trace.active_faults()
        return [
            Violation(trace.name, bound, measured, limit, index, detail, faults, line)
            for bound, measured, limit, index, detail in self.found
        ]


def check_trace(trace: CheckedStream, deadline: Deadline) -> list[Violation]:
    """Every way ``trace`` breaks ``deadline``; a stream that did not complete always does."""
    broken = _Broken()
    cut = not trace.completed and trace.error_kind in CUT_KINDS
    _check_ending(trace, cut, broken)
    _check_held_open(trace, broken)
    if deadline.ttft is not None:
        _check_ttft(trace, deadline.ttft, cut, broken)
    gaps = trace.gaps
    if deadline.chunk is not None and gaps:
        if deadline.percentile is not None:
            _check_gap_percentile(gaps, deadline.chunk, deadline.percentile, broken)
        else:
            _check_every_gap(gaps, deadline.chunk, broken)
    if deadline.total is not None and trace.total is not None and trace.total > deadline.total:
        detail = f"total {trace.total:.3f} s > deadline {deadline.total:.3f} s"
        broken.add("total", trace.total, deadline.total, None, detail)
    return broken.violations(trace)


def _check_ending(trace: CheckedStream, cut: bool, broken: _Broken) -> None:
    """The stream's end: a cut the test expected that did not come, or an end that was not
    the protocol's (not completed) when no cut was expected."""
    chunks = counted(len(trace.chunks), "chunk")
    if trace.expect == "cut" and not cut:
        what = "completed" if trace.completed else f"{trace.error_kind}: {trace.error}"
        detail = (
            f"expected a cut (expect='cut'), but the stream was not cut ({what}) after {chunks}"
        )
        broken.add("expect", trace.total, None, len(trace.chunks), detail)
    elif not trace.completed and trace.expect != "cut":
        # (A cut the test asked for is no violation; what came before it is still held to
        # the bounds checked after this one.)
        trailing = ""
        if trace.chunks and trace.end_ns is not None:
            idle = ns_to_s(trace.end_ns - trace.chunks[-1].stamp_ns)
            trailing = f", {idle:.3f} s after chunk {trace.chunks[-1].index}"
        failure = f"{trace.error_kind}: {trace.error}"
        detail = f"stream did not complete ({failure}) after {chunks}{trailing}"
        broken.add("completed", trace.total, None, len(trace.chunks), detail)


def _check_held_open(trace: CheckedStream, broken: _Broken) -> None:
    """A body the server kept open after the stream's end."""
    if trace.held_open_s is not None:
        detail = (
            f"body held open {trace.held_open_s:.3f} s after the stream's end "
            "(an SDK client that reads to the body's end waits there until its own timeout)"
        )
        broken.add("held_open", trace.held_open_s, None, len(trace.chunks), detail)


def _check_ttft(trace: CheckedStream, ttft: float, cut: bool, broken: _Broken) -> None:
    """The first token's deadline, also for a stream that had none."""
    if trace.ttft is None and trace.completed:
        # An empty answer the test allowed: no first token to time, so the bound applies
        # to the answer itself (request to end), as a user waiting on it would see it.
        waited = trace.total
        if waited is not None and waited > ttft:
            detail = (
                f"empty answer (allowed) ended after {waited:.3f} s > ttft deadline {ttft:.3f} s"
            )
            broken.add("ttft", waited, ttft, 0, detail)
    elif trace.ttft is None:
        # A stream that ended without a token already broke "completed"; its ttft is
        # broken too only if it was still waiting when the ttft deadline ran out.
        waited = trace.total
        if (waited is None or waited > ttft) and not (trace.expect == "cut" and cut):
            after = "" if waited is None else f" in {waited:.3f} s"
            detail = f"no data event arrived{after} (ttft deadline {ttft:.3f} s)"
            broken.add("ttft", waited, ttft, 0, detail)
    elif trace.ttft > ttft:
        broken.marks[0] = f"over ttft {ttft * 1e3:.1f} ms"
        broken.add("ttft", trace.ttft, ttft, 0, f"ttft {trace.ttft:.3f} s > deadline {ttft:.3f} s")


def _check_gap_percentile(gaps: list[float], chunk: float, at: float, broken: _Broken) -> None:
    """The chunk deadline on the ``at``-th percentile of the stream's gaps."""
    value = percentile(gaps, at)
    assert value is not None
    if value > chunk:
        over = [i for i, g in enumerate(gaps) if g > chunk]
        for i in over:
            broken.marks[i + 1] = "gap over chunk deadline"
        detail = (
            f"p{at:g} gap {value:.3f} s > chunk deadline {chunk:.3f} s "
            f"({len(over)} of {len(gaps)} gaps over, first before chunk {over[0] + 1})"
        )
        broken.add("chunk", value, chunk, over[0] + 1, detail)


def _check_every_gap(gaps: list[float], chunk: float, broken: _Broken) -> None:
    """The chunk deadline on every gap; the worst one is the measured value."""
    over = [i for i, g in enumerate(gaps) if g > chunk]
    if over:
        worst = max(over, key=lambda i: gaps[i])
        for i in over:
            broken.marks[i + 1] = f"over {chunk * 1e3:.1f} ms"
        detail = (
            f"gap before chunk {worst + 1} = {gaps[worst]:.3f} s > chunk deadline "
            f"{chunk:.3f} s ({len(over)} of {len(gaps)} gaps over)"
        )
        broken.add("chunk", gaps[worst], chunk, worst + 1, detail)


def check_traces(traces: Sequence[CheckedStream], deadline: Deadline) -> list[Violation]:
    """Every way the streams of one test (or one load) break ``deadline``.

    Without ``percentile`` each stream is checked on its own (:func:`check_trace`). With it,
    ``chunk`` bounds that percentile of the gaps pooled over every stream, so a load of many
    streams is judged on its tail rather than on its single worst gap; ``ttft`` and ``total``
    still bound each stream, and a stream that errored or was cut is still a violation."""
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
            stream=f"{counted(len(traces), 'stream')} pooled",
            bound="chunk",
            measured=value,
            limit=deadline.chunk,
            chunk_index=worst_index + 1,
            detail=(
                f"p{deadline.percentile:g} gap {value:.3f} s > chunk deadline "
                f"{deadline.chunk:.3f} s ({len(over)} of {len(pooled)} gaps over, in "
                f"{counted(streams, 'stream')}; worst {worst_gap:.3f} s before chunk "
                f"{worst_index + 1} of {worst.name})"
            ),
            faults=worst.active_faults(),
            timeline=worst.timeline(marks),
        )
    )
    return found


def assert_traces(
    traces: Sequence[CheckedStream], deadline: Deadline, probe: Probed | None = None
) -> None:
    """Raise :class:`DeadlineViolation` if ``traces`` break ``deadline`` (see
    :func:`check_traces`; ``probe``: the samples of the probe sent beside them). Each
    violation's headline is also kept on its stream's ``caught``, so the reports show what the
    plugin found even when the test expects and catches it."""
    violations = check_traces(traces, deadline)
    if violations:
        by_name = {trace.name: trace for trace in traces}
        for violation in violations:
            by_name.get(violation.stream, traces[0]).caught.append(violation.headline())
        message = format_violations(violations, traces=traces, probe=probe)
        raise DeadlineViolation(message, violations)


#: A bound above this many seconds is refused unless the caller says ``long=True``: such a
#: number is almost always milliseconds written where seconds are meant (``ttft=500``), which
#: would otherwise pass every stream without a word.
LONG_DEADLINE_S = 60.0


def check_units(deadline: Deadline, *, long: bool, call: str, where: str = "") -> None:
    """Raise ValueError when a bound of ``deadline`` is above :data:`LONG_DEADLINE_S` and
    ``long`` is false, saying deadlines are in seconds; ``call`` names the marker or method
    (``token_deadline``), ``where`` where ``long=True`` goes (`` on the marker``)."""
    if long:
        return
    for key in ("ttft", "chunk", "total"):
        value = getattr(deadline, key)
        if value is not None and value > LONG_DEADLINE_S:
            raise ValueError(
                f"{call}({key}={value:g}) is {value:g} seconds: deadlines are in seconds (for "
                f"{value:g} ms write {key}={value / 1000:g}); a deadline above "
                f"{LONG_DEADLINE_S:g} s needs long=True{where}"
            )
