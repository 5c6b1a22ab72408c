"""Findings: named incidents the evidence of a stream (or of a test's streams) shows.

A finding names a cause from the problem table (a buffering ingress, a blocked event loop, a
cold start, an idle timeout, a body held open) and carries the evidence that matched: counts
and times, never a guess without them. Every threshold is a module constant, documented in
docs/findings.md; each is set so that the fixed variant of its incident shows no finding.

One module per family of findings:

- :mod:`.base`: the shape of a stream a rule reads (:class:`Observed`) and :class:`Finding`;
- :mod:`.buffered`: ``buffered``;
- :mod:`.bursts`: ``bursts``;
- :mod:`.ends`: how a stream ended (``idle_cut``, ``held_open``);
- :mod:`.timeouts`: ``total_timeout``;
- :mod:`.backpressure`: ``backpressure``;
- :mod:`.loop`: ``blocked_loop`` and its patterns, confirmed by the probe;
- :mod:`.capacity`: ``queued`` and ``cold_start`` (capacity, not blame);
- :mod:`.server`: ``not_cancelled``, read from the target's gauges;
- :mod:`.said`: ``server_error``, what a hop wrote (a traceback, an error line) beside streams;
- :mod:`.own`: ``own_fault``, a gap the plugin's own fault made, named instead of a cause;
- :mod:`.interrupted`: ``probe_interrupted``, a stream the probe itself may have ended;
- :mod:`.gates`: the ``fail_on`` gates a test could not check (``unchecked``).

:func:`trace_findings` reads one stream; :func:`group_findings` reads the streams of one test
or load together (a blocked loop, a full server and a cold start show only across streams);
:func:`findings_of` is both. The group findings also read the samples of the probe sent to the
target beside the streams (:mod:`pytest_streamguard.verdict.probe`): a blocked loop keeps the
probe waiting, a full server (``queued``) answers it at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_streamguard.common.names import KNOWN, parse_fail_on
from pytest_streamguard.errors import FindingsFailed, FindingsUnchecked
from pytest_streamguard.verdict.findings.backpressure import backpressure
from pytest_streamguard.verdict.findings.base import Finding, Observed
from pytest_streamguard.verdict.findings.buffered import buffered
from pytest_streamguard.verdict.findings.bursts import bursts
from pytest_streamguard.verdict.findings.capacity import cold_start, queued
from pytest_streamguard.verdict.findings.ends import held_open, idle_cut, same_silence
from pytest_streamguard.verdict.findings.gates import Unchecked, unchecked_gates
from pytest_streamguard.verdict.findings.interrupted import probe_interrupted
from pytest_streamguard.verdict.findings.loop import PROBE_WAIT_SHARE, blocked_loop
from pytest_streamguard.verdict.findings.said import Said, server_error
from pytest_streamguard.verdict.findings.server import (
    ENGINE_GAUGE,
    NOT_CANCELLED_AFTER_S,
    OPEN_GAUGE,
    SERVER_SIDE,
    not_cancelled,
    target_gauges,
)
from pytest_streamguard.verdict.findings.timeouts import total_timeout
from pytest_streamguard.verdict.probe import Probed, Waited

__all__ = [
    "ENGINE_GAUGE",
    "KNOWN",
    "NOT_CANCELLED_AFTER_S",
    "OPEN_GAUGE",
    "SERVER_SIDE",
    "Finding",
    "Observed",
    "Probed",
    "Said",
    "Unchecked",
    "findings_failed",
    "findings_of",
    "findings_unchecked",
    "group_findings",
    "not_cancelled",
    "parse_fail_on",
    "target_gauges",
    "trace_findings",
    "unchecked_gates",
]


def trace_findings(trace: Observed) -> list[Finding]:
    """The findings one stream shows by itself: ``buffered`` (else ``bursts``), ``idle_cut``,
    ``held_open``, ``backpressure``; ``own_fault`` instead of one of them where a fault the
    plugin applied made its gap."""
    held = buffered(trace) or bursts(trace)
    found = (held, idle_cut(trace), held_open(trace), backpressure(trace))
    return [f for f in found if f is not None]


def group_findings(traces: Sequence[Observed], probe: Probed | None = None) -> list[Finding]:
    """The findings only several streams of one test or load show: ``server_error`` (what
    the hops said beside them, :mod:`.said`), ``blocked_loop`` (shared
    stalls, else a staircase of heads, else of first tokens, else streams served in turn, else
    every answer released at once; where ``probe`` has samples in the pattern's windows, only
    if it waited there too), ``queued`` (only with the probe's samples), ``cold_start``,
    ``total_timeout``, ``idle_cut`` of streams a hop ended after the same silence, and
    ``probe_interrupted`` (a stream the probe may have ended)."""
    found = (
        *server_error(traces),
        blocked_loop(traces, probe),
        queued(traces, probe),
        cold_start(traces),
        total_timeout(traces),
        probe_interrupted(traces, probe),
    )
    return [f for f in found if f is not None] + same_silence(traces)


def _of_idle_cut(finding: Finding) -> bool:
    return finding.name == "idle_cut" or finding.data.get("instead_of") == "idle_cut"


def _the_loops_doing(
    found: Finding, trace: Observed, blocked: set[str], waited: Waited | None
) -> bool:
    """Whether a blocked loop explains ``found``, a ``held_open`` or ``bursts`` of ``trace``:
    a hold of a stream the ``blocked_loop`` names, or one the probe waited through (a stream
    the loop served first, whose end it then held back while it blocked the others); bursts of
    a stream it names, where the probe waited while they came (the loop released each group
    as it paused between its blocks). The probe's share is ``PROBE_WAIT_SHARE`` or more (the
    blocked loop itself was confirmed at ``LOOP_HELD_SHARE``)."""
    named = bool(blocked.intersection(found.streams))
    if found.name == "held_open":
        if named:
            return True
        held_ns = int(float(found.data["held_open_s"]) * 1e9)
        end = trace.end_ns
        window = None if end is None else (end - held_ns, end)
    elif found.name == "bursts" and named and trace.chunks:
        window = (trace.chunks[0].stamp_ns, trace.chunks[-1].stamp_ns)
    else:
        return False
    return window is not None and waited is not None and waited.share(*window) >= PROBE_WAIT_SHARE


def findings_of(traces: Sequence[Observed], probe: Probed | None = None) -> list[Finding]:
    """Every finding of a test's or a load's streams, in :data:`KNOWN`'s order; a per-stream
    finding seen on several streams is listed once per stream. ``probe``: the samples of the
    probe sent beside them (:mod:`pytest_streamguard.verdict.probe`), which ``blocked_loop``
    and ``queued`` read."""
    grouped = group_findings(traces, probe)
    # A stream of a same-silence idle_cut is named there, not by itself too; one whose end a
    # blocked loop held back, or whose chunks it released in groups, by the blocked loop.
    cut = {name for f in grouped if _of_idle_cut(f) for name in f.streams}
    blocked = {name for f in grouped if f.name == "blocked_loop" for name in f.streams}
    waited = Waited(probe) if probe is not None and blocked else None
    own = [
        f
        for t in traces
        for f in trace_findings(t)
        if not (_of_idle_cut(f) and cut.intersection(f.streams))
        and not _the_loops_doing(f, t, blocked, waited)
    ]
    found = own + grouped
    order = list(KNOWN)
    return sorted(found, key=lambda f: order.index(f.name))


def findings_failed(gated: list[Finding]) -> FindingsFailed:
    """The :class:`~pytest_streamguard.errors.FindingsFailed` to raise for the findings a
    test's ``fail_on`` names (``gated``)."""
    names = ", ".join(dict.fromkeys(f.name for f in gated))
    words = next((f.cause for f in gated if f.cause), "")
    cause = f" (likely cause: {words})" if words else ""
    lines = [f"streamguard finding(s) this test fails on (fail_on): {names}{cause}"]
    lines += [f"  {f.describe()}" for f in gated]
    lines.append("  the thresholds and what each finding means: docs/findings.md")
    return FindingsFailed("\n".join(lines), gated)


def findings_unchecked(unchecked: list[Unchecked]) -> FindingsUnchecked:
    """The :class:`~pytest_streamguard.errors.FindingsUnchecked` to raise, under
    ``--streamguard-unchecked fail``, for the ``fail_on`` gates a test could not check."""
    names = ", ".join(u.finding for u in unchecked)
    lines = [f"streamguard could not check the finding(s) this test fails on (fail_on): {names}"]
    lines += [f"  {u.describe()}" for u in unchecked]
    lines.append("  --streamguard-unchecked warn lists them in the summary instead")
    return FindingsUnchecked("\n".join(lines), unchecked)
