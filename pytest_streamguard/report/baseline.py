"""Baselines: compare this run's per-test figures with a saved report, and gate on regressions
(``--streamguard-compare``, ``--streamguard-compare-fail``; docs/ci.md says what a user sees).

A headroom is compared spread to spread: it regressed when the top of its spread (the value its
repeats were consistent with) fell below the bottom of the baseline's by more than the bound's
share. A figure computed from too few samples is shown but never fails the run (one slow
stream is noise), and a gate that compared nothing is no gate: it fails naming what was
missing (:meth:`Gate.problem_lines`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_streamguard.common.display import counted
from pytest_streamguard.report.bounds import HEADROOM, METRICS, Bound
from pytest_streamguard.report.records import TestRecord
from pytest_streamguard.report.records import _fmt as _ms
from pytest_streamguard.verdict.stats import percentile


def figures(record: TestRecord) -> dict[str, tuple[float | None, int]]:
    """Each metric of one test (seconds) and how many samples it was computed from."""
    samples = {
        "ttft": [t.ttft for t in record.traces if t.ttft is not None],
        "gap": record.gaps(),
    }
    out: dict[str, tuple[float | None, int]] = {}
    for metric, (kind, q) in METRICS.items():
        values = samples[kind]
        figure = (max(values) if values else None) if q is None else percentile(values, q)
        out[metric] = (figure, len(values))
    return out


@dataclass(frozen=True)
class Change:
    """One metric of one test, baseline against this run."""

    nodeid: str
    metric: str
    old: float | None
    new: float | None
    old_samples: int
    new_samples: int
    bound: Bound | None
    regression: bool
    noisy: bool
    #: A headroom's unit (``streams``, ``ms``, ...); None for the times (seconds).
    unit: str | None = None
    #: A headroom's spread in each run (lowest, highest): what its bound was checked against.
    spreads: tuple[tuple[float, float], tuple[float, float]] | None = None

    @property
    def samples(self) -> int:
        """The fewer of the two runs' sample counts."""
        return min(self.old_samples, self.new_samples)

    def describe(self) -> str:
        """``ttft_p95 12.0 -> 30.0 ms (+150%)`` with its bound and noise note."""
        if self.unit is not None:
            return self._describe_level()
        if self.old is None or self.new is None:
            return f"{self.metric} {_ms(self.old)} -> {_ms(self.new)} ms"
        delta = self.new - self.old
        rel = f", {delta / self.old * 100:+.0f}%" if self.old > 0 else ""
        text = f"{self.metric} {_ms(self.old)} -> {_ms(self.new)} ms ({delta * 1e3:+.1f} ms{rel})"
        if self.regression:
            text += f" REGRESSION over {self.bound.describe() if self.bound else ''}"
        elif self.noisy and self.bound is not None and self.bound.exceeded(self.old, self.new):
            samples = counted(self.samples, "sample")
            text += f" (over {self.bound.describe()}, but from {samples}: not failed)"
        return text

    def _describe_level(self) -> str:
        """``headroom streams 8 -> 4 streams (-50%)``, with its bound."""
        old, new = f"{self.old:g}" if self.old is not None else "-", f"{self.new:g}"
        rel = ""
        if self.old and self.new is not None:
            rel = f" ({(self.new - self.old) / self.old * 100:+.0f}%)"
        text = f"{self.metric} {old} -> {new} {self.unit}{rel}"
        if self.spreads is not None:
            (a, b), (c, d) = self.spreads
            text += f" (spread {a:g}-{b:g} -> {c:g}-{d:g})"
        if self.regression and self.bound is not None:
            text += f" REGRESSION over {self.bound.describe()}"
        return text


def compare(
    baseline: list[TestRecord],
    records: list[TestRecord],
    bounds: tuple[Bound, ...],
    min_samples: int,
) -> list[Change]:
    """Every metric of every test present in both runs, in this run's order."""
    old_by_id = {r.nodeid: r for r in baseline}
    limits = {b.metric: b for b in bounds}
    changes: list[Change] = []
    for record in records:
        old_record = old_by_id.get(record.nodeid)
        if old_record is None:
            continue
        old_figures, new_figures = figures(old_record), figures(record)
        for metric in METRICS:
            old, old_n = old_figures[metric]
            new, new_n = new_figures[metric]
            noisy = min(old_n, new_n) < min_samples
            bound = limits.get(metric)
            regression = (
                bound is not None
                and not noisy
                and old is not None
                and new is not None
                and math.isfinite(old)
                and bound.exceeded(old, new)
            )
            changes.append(
                Change(record.nodeid, metric, old, new, old_n, new_n, bound, regression, noisy)
            )
        changes.extend(_headroom_changes(old_record, record, limits.get(HEADROOM)))
    return changes


def _headroom_changes(old: TestRecord, new: TestRecord, bound: Bound | None) -> list[Change]:
    """Each headroom of a test measured in both runs (the first search of each ``vary``):
    a regression when the top of its spread fell below the bottom of the baseline's by more than
    ``bound`` (for bandwidth, whose search runs down, its bottom rose above the top by more)."""
    before = {h.vary: h for h in reversed(old.headroom)}
    changes = []
    for vary, now in {h.vary: h for h in reversed(new.headroom)}.items():
        then = before.get(vary)
        if then is None:
            continue
        (old_low, old_high), (low, high) = then.span, now.span
        # The new value nearest the old, from the old value nearest it: a drop only past both.
        old_end, new_end = (old_high, low) if vary == "bandwidth" else (old_low, high)
        worse = new_end > old_end if vary == "bandwidth" else new_end < old_end
        # A headroom of 0 that stays 0 did not drop; one that was 0 and is not, rose.
        share = abs(new_end - old_end) / old_end * 100 if old_end else math.inf
        regression = bound is not None and worse and share > bound.value
        changes.append(
            Change(
                new.nodeid,
                f"headroom {vary}",
                then.value,
                now.value,
                then.runs,
                now.runs,
                bound,
                regression,
                False,
                now.unit,
                (then.span, now.span),
            )
        )
    return changes


@dataclass(frozen=True)
class Gate:
    """A run compared with a baseline: the changes, the regressions, and what was not compared."""

    baseline_path: str
    bounds: tuple[Bound, ...]
    changes: list[Change]
    run_ids: list[str]
    baseline_ids: list[str]

    @property
    def regressions(self) -> list[Change]:
        """The figures worse than their ``--streamguard-compare-fail`` bound."""
        return [c for c in self.changes if c.regression]

    @property
    def unmeasured(self) -> list[Change]:
        """Gated figures (every figure without a gate) with no sample in one run or both."""
        gated = {b.metric for b in self.bounds} or set(METRICS)
        return [c for c in self.changes if c.metric in gated and c.samples == 0]

    @property
    def compared_nothing(self) -> bool:
        """No test of this run is in the baseline (every test in both yields changes)."""
        return not self.changes

    @property
    def failed(self) -> bool:
        """Under ``--streamguard-compare-fail``: a regression, or something not compared."""
        return bool(self.bounds) and bool(
            self.regressions or self.compared_nothing or self.unmeasured
        )

    def table_lines(self) -> list[str]:
        """Per test one line of changes, and the tests that are new (nothing when no test
        was compared: :meth:`problem_lines` says so)."""
        if self.compared_nothing:
            return []
        lines = [f"compared with baseline {self.baseline_path} (times in ms):"]
        by_test: dict[str, list[Change]] = {}
        for change in self.changes:
            by_test.setdefault(change.nodeid, []).append(change)
        for nodeid, test_changes in by_test.items():
            lines.append(f"  {nodeid}: " + "; ".join(c.describe() for c in test_changes))
        known = set(self.baseline_ids)
        new = [nodeid for nodeid in self.run_ids if nodeid not in known]
        if new:
            lines.append(f"  not in the baseline: {', '.join(new)}")
        return lines

    def problem_lines(self) -> list[str]:
        """What fails the gate (or, without one, what it would warn about), by name: shown at
        every verbosity, since a CI log that ends in exit status 1 must say why."""
        lead = "FAILED --streamguard-compare-fail: " if self.bounds else "warning: "
        lines: list[str] = []
        if self.compared_nothing:
            lines.append(f"{lead}nothing compared: {self._unmatched()}")
        unmeasured = self.unmeasured
        if unmeasured:
            which = "gated figure" if self.bounds else "figure"
            lines.append(f"{lead}{counted(len(unmeasured), which)} with no samples to compare:")
            by_test: dict[str, list[Change]] = {}
            for change in unmeasured:
                by_test.setdefault(change.nodeid, []).append(change)
            for nodeid, test_changes in by_test.items():
                lines.append(f"  {nodeid}: " + "; ".join(_no_samples(c) for c in test_changes))
        regressions = self.regressions
        if regressions:
            lines.append(
                f"{counted(len(regressions), 'regression')} over --streamguard-compare-fail:"
            )
            lines.extend(f"  {c.nodeid}: {c.describe()}" for c in regressions)
        return lines

    def failure_line(self) -> str:
        """The run's last line when the gate failed: what failed it, in a few words."""
        causes = []
        if self.compared_nothing:
            causes.append("nothing compared")
        if self.unmeasured:
            causes.append(f"{counted(len(self.unmeasured), 'gated figure')} with no samples")
        if self.regressions:
            causes.append(counted(len(self.regressions), "regression"))
        return f"streamguard: baseline gate FAILED ({', '.join(causes)}); the reasons are above"

    def _unmatched(self) -> str:
        if not self.run_ids:
            ran = "no test of this run read a stream"
        else:
            ran = f"none of this run's {counted(len(self.run_ids), 'test')} is in the baseline"
        if not self.baseline_ids:
            return f"{ran}; the baseline {self.baseline_path} holds no test"
        shown = ", ".join(self.baseline_ids[:3])
        more = f" and {len(self.baseline_ids) - 3} more" if len(self.baseline_ids) > 3 else ""
        return (
            f"{ran}; the baseline {self.baseline_path} holds "
            f"{counted(len(self.baseline_ids), 'other test')}: {shown}{more}"
        )


def _no_samples(change: Change) -> str:
    kind = METRICS[change.metric][0]
    unit = "streams with a first token" if kind == "ttft" else "gaps between chunks"
    return (
        f"{change.metric} ({change.old_samples} {unit} in the baseline, "
        f"{change.new_samples} in this run)"
    )
