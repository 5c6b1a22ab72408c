"""The headroom gate on spreads (:func:`pytest_streamguard.report.baseline.compare`): a drop
fails only past both runs' spreads, and a baseline saved before spreads reads as none."""

from __future__ import annotations

from pytest_streamguard.headroom.result import Headroom
from pytest_streamguard.report.baseline import compare
from pytest_streamguard.report.bounds import parse_bounds
from pytest_streamguard.report.records import TestRecord

NODE = "test_capacity.py::test_capacity"


def record(value: float, spread: tuple[float, float] | None, vary: str = "streams") -> TestRecord:
    found = Headroom(vary, "streams", value, value + 1, "", (), 64, 1, spread=spread)
    return TestRecord(NODE, None, headroom=[found])


def gate(old: TestRecord, new: TestRecord) -> tuple[bool, str]:
    (change,) = [c for c in compare([old], [new], parse_bounds("headroom:20%"), 1) if c.unit]
    return change.regression, change.describe()


def test_a_drop_within_the_spreads_passes_and_one_past_them_fails_naming_both() -> None:
    # The quiet machine's four searches of one stack: 15, 12, 13, 10.
    base = record(13, (12, 15))
    assert gate(base, record(10, (10, 12))) == (
        False,
        "headroom streams 13 -> 10 streams (-23%) (spread 12-15 -> 10-12)",
    )
    failed, line = gate(base, record(6, (6, 7)))
    assert failed
    assert line == (
        "headroom streams 13 -> 6 streams (-54%) (spread 12-15 -> 6-7) REGRESSION over headroom:20%"
    )
    # Past the bound from the spread's low end, not from the value: 9 is 25% under 12.
    assert gate(base, record(9, (9, 9)))[0]
    assert not gate(base, record(10, (10, 10)))[0]


def test_bandwidth_fails_when_the_low_end_rises_past_the_baseline_top() -> None:
    base = record(100, (100, 110), "bandwidth")
    assert not gate(base, record(130, (125, 130), "bandwidth"))[0]
    assert gate(base, record(140, (135, 140), "bandwidth"))[0]


def test_a_baseline_without_a_spread_reads_as_a_spread_of_zero() -> None:
    raw = record(10, None).headroom[0].to_dict()
    assert raw["spread"] == [10, 10]
    del raw["spread"]
    old = Headroom.from_dict(raw)
    assert old.spread is None
    assert old.span == (10, 10)
    assert Headroom.from_dict(record(10, (8, 11)).headroom[0].to_dict()).span == (8, 11)
    base = TestRecord(NODE, None, headroom=[old])
    assert gate(base, record(7, (7, 8)))[0] is False  # 8 is 20% under 10: not more
    assert gate(base, record(7, (7, 7)))[0] is True
