"""The bounds of ``--streamguard-compare-fail``: how a bound is parsed, with its units, and what
change it judges a regression (pure logic; the gate's runs are in tests/report/test_baseline.py)."""

from __future__ import annotations

import pytest

from pytest_streamguard.report.bounds import Bound, parse_bounds


def test_bounds_parse_units_and_judge_changes() -> None:
    assert parse_bounds("ttft_p95:20%, gap_max:100ms,gap_p95:0.5s") == (
        Bound("ttft_p95", 20.0, True),
        Bound("gap_max", 0.1, False),
        Bound("gap_p95", 0.5, False),
    )
    assert Bound("ttft_p95", 20.0, True).exceeded(0.100, 0.121)
    assert not Bound("ttft_p95", 20.0, True).exceeded(0.100, 0.119)
    assert Bound("gap_max", 0.1, False).exceeded(0.05, 0.151)
    assert not Bound("gap_max", 0.1, False).exceeded(0.05, 0.149)
    # Getting better is never a regression.
    assert not Bound("ttft_p50", 0.0, True).exceeded(0.2, 0.1)


def test_a_headroom_bound_is_a_share_it_may_drop() -> None:
    assert parse_bounds("headroom:20%,ttft_p95:10%") == (
        Bound("headroom", 20.0, True),
        Bound("ttft_p95", 10.0, True),
    )
    with pytest.raises(ValueError, match=r"headroom:2s: a headroom bound is in %"):
        parse_bounds("headroom:2s")
