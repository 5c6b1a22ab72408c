"""The ``--streamguard-compare-fail`` expression: which figure may get how much worse.

Kept free of the plugin's heavier modules so :mod:`pytest_streamguard.plugin.settings` can validate
the option when pytest starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# metric -> (sample kind, percentile or None for the maximum)
METRICS: dict[str, tuple[str, float | None]] = {
    "ttft_p50": ("ttft", 50),
    "ttft_p95": ("ttft", 95),
    "gap_p95": ("gap", 95),
    "gap_max": ("gap", None),
}
#: A test's headroom (``streamguard.headroom()``): how much it may drop, in % only.
HEADROOM = "headroom"
USAGE = (
    "expected comma-separated metric:bound pairs such as 'ttft_p95:20%,gap_p95:30%,"
    f"gap_max:0.1s'; metrics: {', '.join(METRICS)}; a bound is a number >= 0 with a unit: "
    "% (relative to the baseline), s or ms (absolute increase); and headroom:N% (how much a "
    "test's headroom may drop)"
)
_BOUND = re.compile(r"^\s*([a-z0-9_]+)\s*:\s*([0-9]*\.?[0-9]+)\s*(%|ms|s)\s*$")


@dataclass(frozen=True)
class Bound:
    """How much worse one metric may get: ``value`` percent, or seconds when absolute."""

    metric: str
    value: float
    percent: bool

    def describe(self) -> str:
        """The bound as it was written (seconds normalised)."""
        unit = "%" if self.percent else "s"
        return f"{self.metric}:{self.value:g}{unit}"

    def exceeded(self, old: float, new: float) -> bool:
        """Whether ``new`` is worse than ``old`` by more than this bound."""
        worse = new - old
        if self.percent:
            if old <= 0:
                return worse > 0
            return worse / old * 100 > self.value
        return worse > self.value


def parse_bounds(expr: str) -> tuple[Bound, ...]:
    """Parse a ``--streamguard-compare-fail`` expression; ValueError naming what is accepted."""
    bounds: list[Bound] = []
    for part in expr.split(","):
        if not part.strip():
            continue
        match = _BOUND.match(part)
        if match is None:
            raise ValueError(f"{part.strip()!r} is not a metric:bound pair; {USAGE}")
        metric, number, unit = match.groups()
        if metric not in METRICS and metric != HEADROOM:
            raise ValueError(f"unknown metric {metric!r}; {USAGE}")
        if metric == HEADROOM and unit != "%":
            raise ValueError(f"headroom:{number}{unit}: a headroom bound is in %; {USAGE}")
        if any(b.metric == metric for b in bounds):
            raise ValueError(f"metric {metric!r} is given more than once; {USAGE}")
        value = float(number) / (1000 if unit == "ms" else 1)
        bounds.append(Bound(metric, value, unit == "%"))
    if not bounds:
        raise ValueError(f"{expr!r} names no metric; {USAGE}")
    return tuple(bounds)
