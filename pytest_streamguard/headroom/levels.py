"""What each ``vary`` of a headroom search means (its unit, its defaults, and the load and
fault a level is run as), and how a level's load is judged by the test's deadline: the tables
and rules are docs/headroom.md's ("What varies", "How a level is judged").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_streamguard.common.display import counted
from pytest_streamguard.common.numbers import finite
from pytest_streamguard.faults.inject import Faults
from pytest_streamguard.load import LoadResult
from pytest_streamguard.stream.trace import FaultRecord
from pytest_streamguard.verdict.deadlines import Deadline, likely_cause
from pytest_streamguard.verdict.probe import Probed, loop_waits_ns
from pytest_streamguard.verdict.stats import percentile

#: An open-loop level of ``vary="rate"`` sends requests for about this long.
RATE_WINDOW_S = 2.0


@dataclass(frozen=True)
class Axis:
    """One ``vary``: its unit, default ``precision`` and ``up_to``, whether a level must be a
    whole number, and whether the search runs down from ``up_to`` (bandwidth)."""

    vary: str
    unit: str
    precision: float
    up_to: float
    whole: bool = False
    downward: bool = False
    #: The fault a level is run under (None: the level is the load itself).
    fault: Callable[[Faults, float], FaultRecord] | None = None


AXES: dict[str, Axis] = {
    "streams": Axis("streams", "streams", 1, 64, whole=True),
    "rate": Axis("rate", "requests/s", 1, 100),
    "latency": Axis("latency", "ms", 5, 2000, whole=True, fault=lambda f, ms: f.latency(ms)),
    "jitter": Axis(
        "jitter", "ms", 5, 2000, whole=True, fault=lambda f, ms: f.latency(0, jitter=ms)
    ),
    "bandwidth": Axis(
        "bandwidth", "KB/s", 1, 1000, downward=True, fault=lambda f, kb: f.bandwidth(kb)
    ),
    "freeze": Axis("freeze", "s", 0.05, 5, fault=lambda f, s: f.freeze(s)),
}
VARY = tuple(AXES)


def _positive(name: str, value: Any, axis: Axis) -> float:
    if not finite(value) or value <= 0 or (axis.whole and value != int(value)):
        kind = "a whole number" if axis.whole else "a number"
        raise ValueError(
            f"headroom(vary={axis.vary!r}, {name}={value!r}): expected {kind} of {axis.unit} > 0"
        )
    return float(value)


@dataclass(frozen=True)
class Scale:
    """A search's levels: unit index ``k`` (1 first, the mildest) to the level it stands for."""

    axis: Axis
    up_to: float
    precision: float

    @property
    def count(self) -> int:
        """How many levels there are."""
        return max(1, math.floor(self.up_to / self.precision + 1e-9))

    def level(self, k: int) -> float:
        """The level of unit index ``k`` (0: none, the value when even the first broke)."""
        if k == 0:
            return 0.0
        value = self.up_to - (k - 1) * self.precision if self.axis.downward else k * self.precision
        return round(value, 9)


def resolve_axis(vary: str, up_to: Any, precision: Any) -> Scale:
    """The levels of a search of ``vary`` up to ``up_to`` by ``precision`` (None: the axis'
    defaults); a ValueError names what is accepted."""
    axis = AXES.get(vary)
    if axis is None:
        raise ValueError(f"headroom(vary={vary!r}): expected one of {', '.join(VARY)}")
    top = axis.up_to if up_to is None else _positive("up_to", up_to, axis)
    step = axis.precision if precision is None else _positive("precision", precision, axis)
    if step > top:
        raise ValueError(
            f"headroom(vary={vary!r}, up_to={top:g}, precision={step:g}): the precision is "
            "larger than the whole range"
        )
    return Scale(axis, top, step)


@dataclass(frozen=True)
class Judged:
    """A level's load against the deadline: whether it held, its figures, what it broke."""

    held: bool
    figures: dict[str, Any]
    violations: tuple[str, ...]
    findings: str


def probe_figures(probe: Probed | None) -> dict[str, Any]:
    """What the probe beside a level's load saw: how many probes, how many got no answer, the
    longest wait for the loop (seconds: an answer less the target's wait for a CPU meanwhile,
    as the findings read it); empty when the probe was off."""
    if probe is None:
        return {}
    answers = loop_waits_ns(probe)
    return {
        "probe": probe.what,
        "probe_samples": len(probe.samples),
        "probe_unanswered": len(probe.samples) - len(answers),
        "probe_longest_s": max(answers) / 1e9 if answers else None,
    }


def judge(result: LoadResult, deadline: Deadline) -> Judged:
    """Judge a level's load by ``deadline`` at its percentile (see the module docstring)."""
    at = deadline.percentile if deadline.percentile is not None else 100.0
    name = f"p{at:g}" if deadline.percentile is not None else "max"
    traces = result.traces
    ttfts = [t.ttft if t.ttft is not None else math.inf for t in traces]
    totals = [t.total if t.completed and t.total is not None else math.inf for t in traces]
    figures: dict[str, Any] = {
        "streams": len(traces),
        "completed": result.completed,
        "outcomes": result.outcomes,
        "percentile": at,
        **probe_figures(result.probe),
    }
    violations: list[str] = []
    for label, key, samples, bound in (
        ("TTFT", "ttft", ttfts, deadline.ttft),
        ("gap", "gap", result.gaps, deadline.chunk),
        ("total", "total", totals, deadline.total),
    ):
        value = percentile(samples, at)
        figures[f"{key}_{name}_s"] = None if value is None or math.isinf(value) else value
        if bound is None or value is None or value <= bound:
            continue
        if math.isinf(value):
            failed = len(traces) - result.completed
            kinds = ", ".join(f"{n} {k}" for k, n in result.outcomes.items() if k != "completed")
            violations.append(
                f"{label} {name}: {failed} of {counted(len(traces), 'stream')} did not "
                f"complete ({kinds}); bound {bound:g} s"
            )
        else:
            violations.append(f"{label} {name} {value:.3g} s > {bound:g} s")
    findings = likely_cause(traces, probe=result.probe)
    return Judged(not violations, figures, tuple(violations), findings)
