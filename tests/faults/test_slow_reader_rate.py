"""``faults.slow_reader(bytes_per_second)`` reads at the rate asked for, far above the ~45 KB/s
a fixed 4 KiB receive buffer used to cap it at.

Rates are asserted only where correctness needs them: the reader never runs ahead of its rate
(a lower bound the pacing guarantees, whatever the machine's load), a fast slow reader is not
capped near 45 KB/s (an upper bound ten times the expected time), and a slow one is clearly
slower than a normal reader. How close the rate comes is measured, not asserted:
``benchmarks/slow_reader_rate.py``, table in benchmarks/RESULTS.md.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

RATES = """
BIG = {"max_new_tokens": 400, "interval_s": 0, "pad": 1000}
SMALL = {"max_new_tokens": 4, "interval_s": 0, "pad": 1000}


def test_rates(streamguard):
    normal = streamguard.stream(json=SMALL)
    assert normal.completed, normal.error

    streamguard.faults.slow_reader(1_000_000)
    fast = streamguard.stream(json=BIG)
    assert fast.completed, fast.error
    assert fast.nbytes > 400_000
    # Never ahead of 1 MB/s; and ~0.4 s, where the old 45 KB/s cap took ~9 s (bound: 4 s).
    assert fast.total >= fast.nbytes / 1_000_000
    assert fast.total < 4.0, fast.total

    streamguard.faults.clear()
    streamguard.faults.slow_reader(2000)
    slow = streamguard.stream(json=SMALL)
    assert slow.completed, slow.error
    # ~4 KB at 2 KB/s: at least 2 s, where the normal reader took a small fraction of that.
    assert slow.total >= slow.nbytes / 2000
    assert normal.total < slow.total / 4, (normal.total, slow.total)
    # The 2 KB/s reader acted. Whether the 1 MB/s one did depends on the machine: on busy
    # cores the app may send slower than 1 MB/s, and then the reader never waits (said so).
    not_fired = streamguard.faults.judge(streamguard.traces)
    assert [f.params["bytes_per_second"] for f in not_fired] in ([], [1_000_000]), not_fired
"""


def test_slow_reader_keeps_to_its_rate_low_and_high(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    pytester.makepyfile(test_inner=RATES)
    run().assert_outcomes(passed=1)
