"""The pure search (:mod:`pytest_streamguard.headroom.search`) on synthetic predicates."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from pytest_streamguard.headroom.search import REPEATS, Search, max_runs


def run(levels: int, held: Callable[[int], bool]) -> Search:
    search = Search(levels)
    while (level := search.next_level()) is not None:
        search.tell(held(level))
    return search


@pytest.mark.parametrize("levels", [1, 2, 3, 7, 16, 64, 100, 1000])
def test_finds_every_boundary_of_a_monotone_predicate_within_the_bound(levels: int) -> None:
    for capacity in range(levels + 1):
        search = run(levels, lambda level, c=capacity: level <= c)
        assert search.value == capacity
        assert search.broke_at == (capacity + 1 if capacity < levels else None)
        assert len(search.steps) <= max_runs(levels), (capacity, search.steps)


def test_the_bound_is_log2_of_the_range_plus_three() -> None:
    assert [max_runs(n) for n in (1, 2, 16, 64, 100)] == [3, 4, 7, 9, 9]


def test_grows_exponentially_from_the_first_level_as_far_as_the_bound_allows() -> None:
    # Unbounded doubling (1, 2, 4, 8, ...) would spend about twice log2 of the answer; the
    # bound of log2(range) + 3 leaves room for two doublings, then the lowest level that keeps
    # the rest within it.
    search = run(1024, lambda level: level <= 3)
    assert [s.level for s in search.steps][:3] == [1, 2, 513]
    assert (search.value, search.broke_at) == (3, 4)
    search = run(1024, lambda level: level <= 1)
    assert [s.level for s in search.steps][:2] == [1, 2]


def test_the_level_reported_as_held_ran_twice() -> None:
    search = run(64, lambda level: level <= 20)
    confirmations = [s for s in search.steps if s.confirming]
    assert [(s.level, s.held) for s in confirmations] == [(20, True)]
    assert [s.level for s in search.steps].count(20) == 2


def test_nothing_held_needs_no_confirmation() -> None:
    search = run(16, lambda level: False)
    assert (search.value, search.broke_at) == (0, 1)
    assert all(not s.confirming for s in search.steps)


def test_a_lucky_run_above_the_boundary_is_not_believed() -> None:
    # Level 9 is above the capacity of 8 but holds on its first run only (a lucky run).
    lucky = {9: 1}

    def held(level: int) -> bool:
        if level in lucky and lucky[level] > 0:
            lucky[level] -= 1
            return True
        return level <= 8

    search = run(16, held)
    assert (search.value, search.broke_at) == (8, 9)
    assert [(s.level, s.held) for s in search.steps if s.level == 9] == [(9, True), (9, False)]


def test_a_noisy_boundary_still_ends_on_a_level_that_held_every_time() -> None:
    rng = random.Random(7)
    for _ in range(200):
        capacity = rng.randint(0, 64)

        # Levels within 2 of the capacity break now and then; far from it they never flip.
        def held(level: int, c: int = capacity) -> bool:
            if abs(level - c) <= 2:
                return level <= c and rng.random() > 0.3
            return level <= c

        search = run(64, held)
        runs = [s for s in search.steps if s.level == search.value]
        assert search.value == 0 or (len(runs) >= 2 and all(s.held for s in runs))
        assert search.value <= capacity
        assert (search.broke_at is not None and search.broke_at == search.value + 1) or (
            search.broke_at is None
        )
        assert len(search.steps) <= 4 * max_runs(64)


def test_a_search_needs_a_level_and_ends() -> None:
    with pytest.raises(ValueError, match="at least one level"):
        Search(0)
    search = run(4, lambda level: True)
    assert (search.value, search.broke_at, search.done) == (4, None, True)
    with pytest.raises(RuntimeError, match="the search is over"):
        search.tell(True)


def run_repeated(levels: int, held: Callable[[int], bool]) -> Search:
    search = Search(levels, REPEATS)
    while (level := search.next_level()) is not None:
        search.tell(held(level))
    return search


@pytest.mark.parametrize("capacity", [0, 1, 5, 12, 16])
def test_repeats_run_each_boundary_level_three_times_and_a_steady_target_has_no_spread(
    capacity: int,
) -> None:
    search = run_repeated(16, lambda level: level <= capacity)
    assert search.value == capacity
    assert search.spread == (capacity, capacity)
    ran = [s.level for s in search.steps]
    for level in {capacity, capacity + 1} & set(range(1, 17)):
        assert ran.count(level) == REPEATS, ran
    # The repeats cost at most three loads beyond the search's own bound.
    assert len(search.steps) <= max_runs(16) + 2 * REPEATS - 3


def test_a_boundary_that_flips_on_its_repeats_widens_the_spread_and_keeps_the_value() -> None:
    # 12 held its first two runs then broke; 13 broke once, then held: the target is noisy.
    runs: dict[int, int] = {}

    def held(level: int) -> bool:
        runs[level] = runs.get(level, 0) + 1
        if level == 12:
            return runs[level] <= 2
        if level == 13:
            return runs[level] > 1
        return level < 12

    search = run_repeated(16, held)
    assert (search.value, search.broke_at) == (12, 13)
    assert search.spread == (11, 13)
    assert runs[12] == runs[13] == REPEATS


def test_the_cause_is_the_broken_run_of_broke_at_though_a_repeat_of_it_held() -> None:
    # A fresh clone's run: 295 ms broke, then held on a repeat (the spread's top), and the
    # headroom line said "295 ms broke: ;" (the last run of that level, which held, has no
    # cause).
    from pytest_streamguard.headroom.measure import Measurement
    from pytest_streamguard.headroom.result import HeadroomLevel
    from pytest_streamguard.verdict.deadlines import Deadline

    # vary="streams" applies no fault: no Faults needed.
    measurement = Measurement.of(
        Deadline(ttft=0.5), None, vary="streams", up_to=4, precision=1, streams=1
    )
    search = measurement.search
    while (k := search.next_level()) is not None:
        level = measurement.scale.level(k)
        # 3 breaks on its first run only; 1 and 2 always hold.
        held = k < 3 or any(kept.level == level for kept in measurement.levels)
        violations = () if held else ("TTFT max 0.62 s > 0.5 s",)
        measurement.levels.append(HeadroomLevel(level, held, violations=violations))
        search.tell(held)
    found = measurement.headroom()
    assert (found.value, found.broke_at, found.spread) == (2, 3, (2, 3))
    assert [lv.held for lv in found.levels if lv.level == 3][-1] is True
    assert found.cause == "TTFT max 0.62 s > 0.5 s"
