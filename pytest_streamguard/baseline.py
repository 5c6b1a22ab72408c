"""Baselines: compare this run's per-test figures with a saved report, and gate on regressions.

``--streamguard-save PATH`` writes the run's JSON report (it holds every raw sample);
``--streamguard-compare PATH`` reads one back and, per test present in both, shows the change
in TTFT p50/p95 and gap p95/max; ``--streamguard-compare-fail EXPR`` (``metric:bound,...``,
e.g. ``ttft_p95:20%,gap_p95:30%,gap_max:0.1s``) fails the run when a figure got worse by more
than its bound. A figure computed from fewer than ``--streamguard-compare-min-samples``
samples (in either run) is shown but never fails the run: one slow stream is noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_streamguard.bounds import METRICS, Bound
from pytest_streamguard.reports import TestRecord
from pytest_streamguard.stats import percentile

DEFAULT_MIN_SAMPLES = 5


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
    samples: int  # the fewer of the two runs' sample counts
    bound: Bound | None
    regression: bool
    noisy: bool

    def describe(self) -> str:
        """``ttft_p95 12.0 -> 30.0 ms (+150%)`` with its bound and noise note."""
        if self.old is None or self.new is None:
            return f"{self.metric} {_ms(self.old)} -> {_ms(self.new)} ms"
        delta = self.new - self.old
        rel = f", {delta / self.old * 100:+.0f}%" if self.old > 0 else ""
        text = f"{self.metric} {_ms(self.old)} -> {_ms(self.new)} ms ({delta * 1e3:+.1f} ms{rel})"
        if self.regression:
            text += f" REGRESSION over {self.bound.describe() if self.bound else ''}"
        elif self.noisy and self.bound is not None and self.bound.exceeded(self.old, self.new):
            text += (
                f" (over {self.bound.describe()}, but from {self.samples} sample(s): not failed)"
            )
        return text


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


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
            samples = min(old_n, new_n)
            noisy = samples < min_samples
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
                Change(record.nodeid, metric, old, new, samples, bound, regression, noisy)
            )
    return changes


def compare_lines(
    changes: list[Change], baseline_path: str, records: list[TestRecord], baseline_ids: set[str]
) -> list[str]:
    """The terminal section: per test one line of changes, then the regressions by name."""
    lines = [f"compared with baseline {baseline_path} (times in ms):"]
    by_test: dict[str, list[Change]] = {}
    for change in changes:
        by_test.setdefault(change.nodeid, []).append(change)
    for nodeid, test_changes in by_test.items():
        lines.append(f"  {nodeid}: " + "; ".join(c.describe() for c in test_changes))
    new = [r.nodeid for r in records if r.nodeid not in baseline_ids]
    if new:
        lines.append(f"  not in the baseline: {', '.join(new)}")
    regressions = [c for c in changes if c.regression]
    if regressions:
        lines.append(f"{len(regressions)} regression(s) over --streamguard-compare-fail:")
        lines.extend(f"  {c.nodeid}: {c.describe()}" for c in regressions)
    return lines
