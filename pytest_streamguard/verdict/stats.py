"""Latency statistics over raw samples.

Percentiles use the **nearest-rank** method: the q-th percentile of n sorted samples is the
sample at rank ``ceil(q / 100 * n)`` (1-based). It always returns a value that was measured, so
"p95 gap = 0.31 s" names a real gap, and it is exact for small samples (a stream has tens of
gaps, not millions). Percentiles are computed from raw samples, never averaged across streams
or workers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction


def percentile(samples: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``samples``; None when empty."""
    if not 0 < q <= 100:
        raise ValueError(f"percentile q={q!r} is out of range: expected 0 < q <= 100")
    if not samples:
        return None
    ordered = sorted(samples)
    # The rank in exact arithmetic on q as written: in floats 99.9 / 100 * 1000 is 999.0000001,
    # one rank too high.
    rank = math.ceil(Fraction(repr(q)) * len(ordered) / 100)
    return ordered[max(rank, 1) - 1]


def ns_to_s(ns: int) -> float:
    """Nanoseconds to seconds."""
    return ns / 1e9
