"""A load's plan (``LoadPlan``, ``pytest_streamguard.load``): bad arguments name what is accepted,
and the open-loop arrivals are constant or seeded Poisson (the loads' runs are in
tests/load/test_load.py)."""

from __future__ import annotations

import itertools
import statistics

import pytest

from pytest_streamguard.load import LoadPlan


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0}, "load n=0 is not accepted: expected an int from 1 to 5000"),
        ({"n": 5001}, "load n=5001 is not accepted"),
        ({"n": 2.0}, "load n=2.0 is not accepted"),
        ({"n": True}, "load n=True is not accepted"),
        ({"n": 5, "rate": 0}, "load rate=0 is not accepted: expected a number of requests per"),
        ({"n": 5, "rate": float("inf")}, "load rate=inf is not accepted"),
        ({"n": 5, "duration": -1}, "load duration=-1 is not accepted: expected a number of sec"),
        ({"n": 5, "duration": "5"}, "load duration='5' is not accepted"),
        ({"n": 5, "rate": 5, "arrival": "burst"}, "load arrival='burst' is not accepted: expected"),
        ({"n": 5, "arrival": "poisson"}, "load arrival='poisson' needs rate="),
        ({"n": 5, "rate": 5, "seed": "x"}, "load seed='x' is not accepted"),
    ],
)
def test_bad_load_arguments_name_what_is_accepted(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(".", r"\.")):
        LoadPlan(**kwargs)  # type: ignore[arg-type]


def test_open_loop_arrivals_constant_and_seeded_poisson() -> None:
    constant = LoadPlan(n=100, rate=20.0, duration=1.0).start_offsets()
    assert constant == pytest.approx([i / 20 for i in range(20)])
    assert len(LoadPlan(n=5, rate=20.0).start_offsets()) == 5
    poisson = LoadPlan(n=2000, rate=50.0, arrival="poisson", seed=7).start_offsets()
    assert poisson == LoadPlan(n=2000, rate=50.0, arrival="poisson", seed=7).start_offsets()
    assert poisson != LoadPlan(n=2000, rate=50.0, arrival="poisson", seed=8).start_offsets()
    gaps = [b - a for a, b in itertools.pairwise(poisson)]
    # Exponential gaps: mean 1/rate and standard deviation equal to the mean (5% tolerance
    # for 2000 samples), unlike the constant schedule's zero spread.
    assert statistics.mean(gaps) == pytest.approx(1 / 50, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(1 / 50, rel=0.1)
